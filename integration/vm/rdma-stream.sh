#!/usr/bin/env bash
# Inside the test bed: byte streams through ferry over RDMA, and every way a connection
# stays on TCP. Each scenario runs stream_check.py (blocking sockets, both directions
# at once, sha256 per stream) and then reads ferry's counters and the kernel's TCP
# segment counts to prove where the bytes went.
#   rdma-stream.sh BUILD_DIR [SCENARIO...]
set -euo pipefail
build=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
ip=${TESTBED_IP:?run inside integration/testbed}
out=${VM_OUT:-/tmp}
ferry=$build/ferry
check="/usr/bin/python3 $here/stream_check.py"
port=7000
failures=0

say() { printf '%s\n' "$*"; }
fail() { say "FAIL [$scenario]: $*"; failures=$((failures + 1)); }

# counter SIDE FIELD: the value at exit of the process that ran as SIDE.
counter() { awk -v f="$2" '$1 == f {v = $2} END {print v + 0}' "$out/$scenario.$1.log" 2>/dev/null || echo 0; }
# kernel SIDE WHICH: the kernel's count of TCP payload bytes (tcp_info) the side's
# connections sent ("sent") or received ("received"), as stream_check printed it.
kernel() { sed -n "s/.*kernel TCP bytes sent \([0-9]*\) received \([0-9]*\).*/\1 \2/p" "$out/$scenario.$1.out" | \
  awk -v w="$2" '{print (w == "sent") ? $1 : $2}'; }

# pair SERVER_MODE CLIENT_MODE CONNECTIONS SERVER_IP SIZES...: MODE is ferry, plain, or
# "ferry VAR=value..." for extra settings.
pair() {
  local smode=$1 cmode=$2 conns=$3 sip=$4
  shift 4
  port=$((port + 1))
  local -a spre=() cpre=()
  [ "${smode%% *}" = ferry ] && spre=(env FERRY_STATS=1 FERRY_BACKTRACE=1 FERRY_LOG=${FERRY_LOG:-warn} "FERRY_LOG_FILE=$out/$scenario.server.log" ${smode#ferry} "$ferry")
  [ "${cmode%% *}" = ferry ] && cpre=(env FERRY_STATS=1 FERRY_BACKTRACE=1 "FERRY_LOG_FILE=$out/$scenario.client.log" ${cmode#ferry} "$ferry")
  rm -f "$out/$scenario".*.log
  STREAM_SETTLE="${STREAM_SETTLE:-0}" "${spre[@]}" $check server "$sip" "$port" "$conns" > "$out/$scenario.server.out" 2>&1 &
  local server=$!
  for _ in $(seq 100); do grep -q listening "$out/$scenario.server.out" 2>/dev/null && break; sleep 0.1; done
  if ! timeout 300 env STREAM_SETTLE="${STREAM_SETTLE:-0}" "${cpre[@]}" $check client "$sip" "$port" "$conns" "$@" > "$out/$scenario.client.out" 2>&1; then
    fail "client (status $?): $(tail -3 "$out/$scenario.client.out")"
  fi
  if ! timeout 60 tail --pid=$server -f /dev/null; then
    kill $server 2>/dev/null
    fail "server did not finish"
  fi
  wait $server || fail "server: $(tail -3 "$out/$scenario.server.out")"
  say "[$scenario] $(tail -1 "$out/$scenario.client.out")"
}

expect() {  # expect SIDE FIELD OP VALUE
  local v
  v=$(counter "$1" "$2")
  if ! [ "$v" "$3" "$4" ]; then fail "$1 $2 = $v, expected $3 $4"; fi
}

# Where the bytes went: ferry's counters add up to the whole stream, and the kernel's
# own TCP byte counts are exactly the bytes ferry sent before the cutover.
expect_rdma() {  # expect_rdma STREAM_BYTES_EACH_WAY CONNECTIONS
  local side k f r conns=$2
  for side in client server; do
    k=$(kernel $side sent)
    f=$(counter $side bytes_tcp_sent)
    r=$(counter $side bytes_rdma_sent)
    # tcp_info counts a FIN as one byte acknowledged
    [ "$k" -ge "$f" ] && [ "$k" -le $((f + 2 * conns)) ] ||
      fail "$side: kernel TCP carried $k bytes, ferry counted $f before the cutover"
    [ $((f + r)) -ge "$1" ] || fail "$side: $f + $r bytes sent, expected at least $1"
    [ "$r" -gt $(( $1 / 2 )) ] || fail "$side: only $r of $1 bytes went over RDMA"
    say "[$scenario] $side sent $f bytes on kernel TCP (before the cutover) and $r over RDMA"
  done
}

scenario_integrity_one() {
  pair ferry ferry 1 "$ip" $((64 << 20))
  expect client upgraded -eq 1
  expect server upgraded -eq 1
  expect_rdma $((64 << 20)) 1
}

scenario_integrity_many() {
  STREAM_SETTLE=4 pair ferry ferry 64 "$ip" 1 7 4093 65537 1000003 262147 3000017 4096 131072
  expect client upgraded -eq 64
  expect server upgraded -eq 64
  expect_rdma 30000000 64
}

scenario_server_plain() {
  pair plain ferry 4 "$ip" 1000003
  expect client upgraded -eq 0
  expect client tcp_peer_refused -eq 4
}

scenario_client_plain() {
  pair "ferry FERRY_UPGRADE_TIMEOUT_MS=300" plain 4 "$ip" 1000003
  expect server upgraded -eq 0
  expect server tcp_peer_refused -eq 4
}

scenario_device_excluded() {
  pair ferry "ferry FERRY_DEVICES=nosuchdev" 2 "$ip" 100000
  expect client upgraded -eq 0
  expect client tcp_device_excluded -eq 2
}

scenario_disabled() {
  pair "ferry FERRY_ENABLE=0" "ferry FERRY_ENABLE=0" 2 "$ip" 100000
  expect client upgrades_started -eq 0
}

scenario_loopback() {
  pair ferry ferry 2 127.0.0.1 100000
  expect client upgrades_started -eq 0
  expect client bytes_tcp_received -ge 100000
}

all=(integrity_one integrity_many server_plain client_plain device_excluded disabled loopback)
for scenario in "${@:-${all[@]}}"; do
  "scenario_$scenario"
done
[ $failures -eq 0 ] && say "rdma-stream: all scenarios passed" || say "rdma-stream: $failures failure(s)"
[ $failures -eq 0 ]
