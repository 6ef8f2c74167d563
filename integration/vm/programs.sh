#!/usr/bin/env bash
# Inside the test bed: unmodified programs, both ends under ferry, over rxe0's
# address. Each must succeed exactly as it does without ferry; the table shows where
# its bytes went (ferry's counters) and why a connection stayed on TCP.
#   programs.sh BUILD_DIR
set -uo pipefail
build=$1
ip=${TESTBED_IP:?run inside integration/testbed}
out=${VM_OUT:-/tmp}
ferry=$build/ferry
failures=0
declare -a rows

fail() { echo "FAIL [$name]: $*"; failures=$((failures + 1)); }

under() {  # under SIDE CMD...: runs CMD under ferry with its counters in $out/$name.SIDE.*.log
  local side=$1
  shift
  FERRY_STATS=1 FERRY_BACKTRACE=1 FERRY_LOG_FILE="$out/$name.$side.%p.log" "$ferry" "$@"
}

serve() {  # serve CMD...: the server under ferry, in the background; its pid in $server
  FERRY_STATS=1 FERRY_BACKTRACE=1 FERRY_LOG_FILE="$out/$name.server.%p.log" "$ferry" "$@" > "$out/$name.server.out" 2>&1 &
  server=$!
}

wait_port() {
  for _ in $(seq 100); do ss -Hltn "sport = :$1" | grep -q LISTEN && return 0; sleep 0.1; done
  fail "nothing listens on port $1"
}

stop() {  # stop PID: counters via ferry stat, then SIGTERM
  "$ferry" stat "$1" >> "$out/$name.server.$1.log" 2>/dev/null
  kill "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

sum() {  # sum FIELD: over every process of this program; each process's largest reading
  awk -v f="$1" '$1 == f && $2 > m[FILENAME] {m[FILENAME] = $2} END {for (k in m) s += m[k]; printf "%.0f", s}' \
    "$out/$name".*.log 2>/dev/null
}

expect_rdma() {  # expect_rdma MIN_BYTES: this program's bytes went over RDMA, at both ends
  local up; up=$(sum upgraded)
  [ "$up" -ge 2 ] || fail "expected on RDMA at both ends, upgraded=$up"
  [ "$(sum bytes_rdma_sent)" -ge "$1" ] || fail "only $(sum bytes_rdma_sent) bytes over RDMA"
}

record() {  # record RESULT: one row of the table, and no warnings in ferry's logs
  local reasons="" r
  for r in tcp_no_rdma tcp_no_route tcp_device_excluded tcp_peer_refused tcp_timeout tcp_resources tcp_other_listener; do
    [ "$(sum $r)" -gt 0 ] && reasons+="${r#tcp_}=$(sum $r) "
  done
  grep -hE ' (warn|error) |fatal' "$out/$name".*.log && fail "ferry logged warnings"
  rows+=("$(printf '%-16s %-6s %9s %14s %14s  %s' "$name" "$1" "$(sum upgraded)" "$(sum bytes_rdma_sent)" \
    "$(sum bytes_tcp_sent)" "${reasons:--}")")
}

name=NPtcp
(cd /tmp && under server NPtcp > "$out/$name.server.out" 2>&1) &
server=$!
sleep 1
(cd /tmp && timeout 300 "$ferry" true) # warm the page cache of the library
if (cd /tmp && FERRY_STATS=1 FERRY_LOG_FILE="$out/$name.client.%p.log" timeout 300 "$ferry" NPtcp -h "$ip" -u 262144 \
      -o "$out/np.out" > "$out/$name.client.out" 2>&1); then res=ok; else res=FAILED; fail "$(tail -3 "$out/$name.client.out")"; fi
wait $server
expect_rdma 1000000
record $res

name=iperf3
for args in "-P 4" "-R"; do
  serve iperf3 -s -1 -B "$ip" -p 5201
  wait_port 5201
  if under client iperf3 -c "$ip" -p 5201 -t 2 $args > "$out/$name.client.out" 2>&1; then res=ok; else
    res=FAILED; fail "iperf3 $args: $(tail -3 "$out/$name.client.out")"; fi
  wait $server || fail "iperf3 server"
done
expect_rdma 10000000
record $res

name=redis
serve redis-server --port 6380 --bind "$ip" --protected-mode no --save '' --appendonly no
wait_port 6380
under client redis-benchmark -h "$ip" -p 6380 -c 50 -P 16 -n 5000 -q > "$out/$name.client.out" 2>&1
n=$(tr '\r' '\n' < "$out/$name.client.out" | grep -c 'requests per second')
if [ "$n" -ge 15 ] && ! grep -qiE 'error|refused' "$out/$name.client.out"; then res=ok; else
  res=FAILED; fail "redis-benchmark: $n results; $(tail -3 "$out/$name.client.out")"; fi
stop $server
expect_rdma 1000000
record $res

name=sockperf
echo "T:$ip:11111" > "$out/sockperf.feed"  # a feed file lets the server multiplex with epoll
serve sockperf server -f "$out/sockperf.feed" -F epoll
wait_port 11111
res=ok
under client sockperf ping-pong --tcp -i "$ip" -p 11111 -t 2 -m 64 > "$out/$name.pp.out" 2>&1 &&
  grep -q 'Summary: Latency' "$out/$name.pp.out" || { res=FAILED; fail "ping-pong: $(tail -2 "$out/$name.pp.out")"; }
under client sockperf throughput --tcp -i "$ip" -p 11111 -t 2 -m 65000 > "$out/$name.tp.out" 2>&1 &&
  grep -q 'Summary: BandWidth' "$out/$name.tp.out" || { res=FAILED; fail "throughput: $(tail -2 "$out/$name.tp.out")"; }
# Many clients at once, multiplexed by the server's epoll.
for i in 1 2 3 4; do
  under client sockperf ping-pong --tcp -i "$ip" -p 11111 -t 2 -m 256 > "$out/$name.many$i.out" 2>&1 &
done
wait $(jobs -p | grep -vx "$server") 2>/dev/null
for i in 1 2 3 4; do
  grep -q 'Summary: Latency' "$out/$name.many$i.out" || { res=FAILED; fail "client $i of 4: $(tail -2 "$out/$name.many$i.out")"; }
done
stop $server
expect_rdma 1000000
[ "$(sum upgraded)" -ge 12 ] || fail "expected the 6 sockperf connections on RDMA at both ends, upgraded=$(sum upgraded)"
record $res

name=memcached
serve memcached -u root -l "$ip" -p 11211 -t 4 -c 1024
server_pid=$server
wait_port 11211
if under client memcaslap -s "$ip:11211" -T 2 -c 32 -t 3s -v 0.1 > "$out/$name.client.out" 2>&1 &&
   grep -q 'Run time' "$out/$name.client.out" && grep -q '^verify_failed: 0$' "$out/$name.client.out" &&
   grep -q '^verify_misses: 0$' "$out/$name.client.out"; then res=ok; else
  res=FAILED; fail "memcaslap: $(tail -3 "$out/$name.client.out")"; fi
stop $server_pid
expect_rdma 100000
record $res

name=asyncio
asyncio_echo="$(cd "$(dirname "$0")/.." && pwd)/programs/asyncio_echo.py"
serve /usr/bin/python3 "$asyncio_echo" server "$ip" 7788
wait_port 7788
if under client /usr/bin/python3 "$asyncio_echo" client "$ip" 7788 16 40 > "$out/$name.client.out" 2>&1; then res=ok; else
  res=FAILED; fail "$(tail -3 "$out/$name.client.out")"; fi
stop $server
expect_rdma 1000000
record $res

name=qperf
serve qperf
wait_port 19765
if under client qperf "$ip" -t 2 tcp_lat tcp_bw > "$out/$name.client.out" 2>&1 &&
   grep -q 'latency' "$out/$name.client.out" && grep -q 'bw' "$out/$name.client.out"; then res=ok; else
  res=FAILED; fail "$(tail -3 "$out/$name.client.out")"; fi
stop $server
expect_rdma 10000000  # each test's data connection is served by a forked child
record $res

name=fork-server
fork_echo="$(cd "$(dirname "$0")/.." && pwd)/programs/fork_echo.py"
serve /usr/bin/python3 "$fork_echo" server "$ip" 7777
wait_port 7777
if under client /usr/bin/python3 "$fork_echo" client "$ip" 7777 8 > "$out/$name.client.out" 2>&1; then res=ok; else
  res=FAILED; fail "$(tail -3 "$out/$name.client.out")"; fi
stop $server
record $res

printf '\n%-16s %-6s %9s %14s %14s  %s\n' program result upgraded rdma_sent tcp_sent "kept on TCP (reason=connections)"
printf '%s\n' "${rows[@]}"
[ $failures -eq 0 ] && echo "programs: all passed" || echo "programs: $failures failure(s)"
[ $failures -eq 0 ]
