#!/usr/bin/env bash
# sockperf TCP ping-pong and throughput, plainly and with both ends under ferry.
. "$(dirname "$0")/lib.sh"

for mode in plain ferry; do
  port=$(free_port)
  bg "$mode" "server-$mode" sockperf server --tcp -i 127.0.0.1 -p "$port"
  server=$last_pid
  wait_listening "$port"
  run "$mode" "pp-$mode" sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -t 2 -m 64 > "$work/pp-$mode.txt" 2>&1 \
    || fail "$mode: ping-pong failed: $(cat "$work/pp-$mode.txt")"
  grep -q 'Summary: Latency is' "$work/pp-$mode.txt" || fail "$mode: no latency summary: $(cat "$work/pp-$mode.txt")"
  run "$mode" "tp-$mode" sockperf throughput --tcp -i 127.0.0.1 -p "$port" -t 2 -m 65000 > "$work/tp-$mode.txt" 2>&1 \
    || fail "$mode: throughput failed: $(cat "$work/tp-$mode.txt")"
  grep -q 'Summary: BandWidth is' "$work/tp-$mode.txt" || fail "$mode: no bandwidth summary: $(cat "$work/tp-$mode.txt")"
  grep -iE '(^|[^a-z])error' "$work/pp-$mode.txt" "$work/tp-$mode.txt" && fail "$mode: sockperf reported errors"
  stop "$server"
  echo "$mode: $(grep 'Summary: Latency is' "$work/pp-$mode.txt")"
done
expect_tcp_bytes pp-ferry
expect_tcp_bytes tp-ferry
expect_tcp_bytes server-ferry
echo PASS
