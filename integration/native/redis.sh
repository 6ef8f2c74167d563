#!/usr/bin/env bash
# redis-server + redis-benchmark -c 50 -P 16 (every default test), plainly and with both
# under ferry; plus a value round trip checked byte for byte.
. "$(dirname "$0")/lib.sh"

for mode in plain ferry; do
  port=$(free_port)
  bg "$mode" "server-$mode" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" --daemonize no
  server=$last_pid
  wait_listening "$port"
  run "$mode" "bench-$mode" redis-benchmark -p "$port" -c 50 -P 16 -n 20000 -q > "$work/bench-$mode.txt" 2>&1 \
    || fail "$mode: redis-benchmark failed: $(cat "$work/bench-$mode.txt")"
  tr '\r' '\n' < "$work/bench-$mode.txt" | grep -E 'requests per second' > "$work/bench-$mode.rows" || true
  rows=$(wc -l < "$work/bench-$mode.rows")
  [ "$rows" -ge 15 ] || fail "$mode: only $rows benchmark results: $(cat "$work/bench-$mode.txt")"
  grep -qiE 'error|refused' "$work/bench-$mode.txt" && fail "$mode: errors in benchmark: $(grep -iE 'error|refused' "$work/bench-$mode.txt" | head)"
  head -c 1048576 /dev/urandom | base64 -w0 > "$work/value"
  run "$mode" "cli-$mode" redis-cli -p "$port" -x SET key < "$work/value" | grep -q OK || fail "$mode: SET failed"
  run "$mode" "cli-$mode" redis-cli -p "$port" --raw GET key | head -c -1 > "$work/got"
  cmp -s "$work/value" "$work/got" || fail "$mode: value came back different"
  stop "$server"
  echo "$mode: $rows redis-benchmark tests, 1 MiB value intact"
done
expect_tcp_bytes server-ferry
expect_tcp_bytes bench-ferry
echo PASS
