#!/usr/bin/env bash
# Inside the two-host test bed (integration/testbed --hosts 2), on both guests:
# unmodified programs across the wire, both ends under ferry, each server on host 1 and
# its clients on host 2: iperf3 (-P 4, -R), redis-server + redis-benchmark, sockperf
# (ping-pong, throughput), nginx (master + 4 workers, sendfile) with curl (an 8 MiB file,
# sha256-checked) and wrk. They meet in $TESTBED_SHARED: host 1 says when a server
# listens, host 2 when its clients are done; each host leaves its processes' counters
# there, and host 2 prints the table of both.
#   cross-programs.sh BUILD_DIR
# Fails if a program fails, if either end of its connections did not upgrade or no
# byte went over RDMA, or if less than 99% of what iperf3's, sockperf's or wrk's
# connections carried in 3 s once all of them had upgraded went over RDMA
# (window_rdma). The share of each program's whole run (its first bytes go on TCP
# while it upgrades, for as long as the machine takes) is reported in the table, not
# judged.
set -uo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
host=${TESTBED_HOST:?run inside integration/testbed --hosts 2}
shared=${TESTBED_SHARED:?run inside integration/testbed --hosts 2}
out=${VM_OUT:-/tmp}
ferry=$build/ferry
export PATH=$PATH:/usr/sbin:/sbin
# nginx's workers drop root for nobody: their rings count against this (README).
ulimit -l 65536
source "$(dirname "$0")/common.sh"
declare -a rows
# Rows count upgrades: the upgrade window (FERRY_UPGRADE_TIMEOUT_MS, 2 s by default,
# after which a connection stays on TCP) is a limit for hangs here, not a race with
# the machine's speed.
export FERRY_UPGRADE_TIMEOUT_MS=30000

fail() { failed_with "FAIL [$name] host $host: $*"; }

# shellcheck source=integration/vm/meet.sh
. "$here/meet.sh"

under() {  # under SIDE CMD...: CMD under ferry, its counters in $out/$name.SIDE.PID.log
  local side=$1
  shift
  FERRY_STATS=1 FERRY_BACKTRACE=1 FERRY_LOG_FILE="$out/$name.$side.%p.log" "$ferry" "$@"
}

serve() {  # serve PORT CMD...: the server under ferry in the background ($server), listening
  local port=$1 i
  shift
  FERRY_STATS=1 FERRY_BACKTRACE=1 FERRY_LOG_FILE="$out/$name.server.%p.log" "$ferry" "$@" > "$out/$name.server.out" 2>&1 &
  server=$!
  for i in $(seq 100); do ss -Hltn "sport = :$port" | grep -q LISTEN && return 0; sleep 0.1; done
  fail "nothing listens on port $port"
}

sum() {  # sum FIELD FILES...: over these processes' logs, each one's largest reading
  local f=$1
  shift
  awk -v f="$f" '$1 == f && $2 > m[FILENAME] {m[FILENAME] = $2} END {for (k in m) s += m[k]; printf "%.0f", s}' "$@" \
    2>/dev/null
}

# figures: this host's counters for the program, summed over its processes.
figures() {
  local k
  for k in upgraded bytes_rdma_sent bytes_tcp_sent requests_redirected; do
    echo "$k $(sum $k "$out/$name".*.log)"
  done
}
fact() { awk -v k="$2" '$1 == k {print $2}' "$shared/$name.host$1"; }

# program NAME: runs NAME_server on host 1 and NAME_client on host 2; on host 2,
# checks that both ends upgraded and that bytes went over RDMA, and adds the row (with
# the share of the whole run's bytes that went over RDMA).
program() {
  name=$1
  local res=ok r t
  if [ "$host" = 1 ]; then
    "${name}_server"
    touch "$shared/$name.ready"
    wait_for 600 "$shared/$name.done" || fail "host 2 never finished"
    local p
    for p in $server $(pgrep -P "$server"); do "$ferry" stat "$p" >> "$out/$name.server.$p.log" 2>/dev/null; done
    kill "$server" 2>/dev/null
    wait "$server" 2>/dev/null
    figures > "$shared/$name.host1.tmp" && mv "$shared/$name.host1.tmp" "$shared/$name.host1"
    return
  fi
  wait_for 300 "$shared/$name.ready" || { fail "host 1 never served"; return; }
  "${name}_client" || res=FAILED
  touch "$shared/$name.done"
  figures > "$shared/$name.host2"
  wait_for 60 "$shared/$name.host1" || { fail "host 1 never reported"; return; }
  [ "$(fact 1 upgraded)" -ge 1 ] && [ "$(fact 2 upgraded)" -ge 1 ] ||
    fail "upgraded on host 1: $(fact 1 upgraded), host 2: $(fact 2 upgraded)"
  r=$(($(fact 1 bytes_rdma_sent) + $(fact 2 bytes_rdma_sent)))
  t=$(($(fact 1 bytes_tcp_sent) + $(fact 2 bytes_tcp_sent)))
  [ "$r" -gt 0 ] || fail "no byte went over RDMA ($t on TCP)"
  rows+=("$(printf '%-10s %-6s %9s %20s %20s %9s' "$name" "$res" "$(fact 1 upgraded)/$(fact 2 upgraded)" \
    "$(fact 1 bytes_tcp_sent)/$(fact 1 bytes_rdma_sent)" "$(fact 2 bytes_tcp_sent)/$(fact 2 bytes_rdma_sent)" \
    "$((r * 100 / (r + t)))%")")
  grep -hE ' (warn|error) |fatal' "$out/$name".*.log && fail "ferry logged warnings"
}

ip=$TESTBED_IP peer=$TESTBED_PEER_IP

iperf3_server() { serve 5201 iperf3 -s -B "$ip" -p 5201; }
iperf3_client() {
  local args
  # -P 4 until its window (window_rdma), then SIGINT: iperf3 reports and ends.
  under client iperf3 -c "$peer" -p 5201 -t 600 -P 4 > "$out/$name.window.out" 2>&1 &
  window_rdma iperf3 4 || args=failed
  pkill -INT -n -x iperf3
  wait
  [ -z "${args:-}" ] || return 1
  for args in "-P 4" "-R"; do
    under client iperf3 -c "$peer" -p 5201 -t 3 $args > "$out/$name.client.out" 2>&1 ||
      { fail "iperf3 $args: $(tail -3 "$out/$name.client.out")"; return 1; }
  done
}

redis_server() { serve 6380 redis-server --port 6380 --bind "$ip" --protected-mode no --save '' --appendonly no; }
redis_client() {
  local n
  under client redis-benchmark -h "$peer" -p 6380 -c 50 -P 16 -n 20000 -q > "$out/$name.client.out" 2>&1
  n=$(tr '\r' '\n' < "$out/$name.client.out" | grep -c 'requests per second')
  [ "$n" -ge 15 ] && ! grep -qiE 'error|refused' "$out/$name.client.out" ||
    { fail "redis-benchmark: $n results; $(tail -3 "$out/$name.client.out")"; return 1; }
}

sockperf_server() {
  echo "T:$ip:11111" > "$out/sockperf.feed"  # a feed file lets the server multiplex with epoll
  serve 11111 sockperf server -f "$out/sockperf.feed" -F epoll
}
sockperf_client() {
  # A ping-pong until its window (window_rdma), then stopped.
  # --mps: sockperf keeps every sample of -t's run
  under client sockperf ping-pong --tcp -i "$peer" -p 11111 -t 600 --mps 2000 -m 256 > "$out/$name.window.out" 2>&1 &
  local ok=0
  window_rdma sockperf 1 || ok=1
  pkill -f "^sockperf ping-pong --tcp -i $peer -p 11111 -t 600 "
  wait
  [ $ok = 0 ] || return 1
  under client sockperf ping-pong --tcp -i "$peer" -p 11111 -t 3 -m 64 > "$out/$name.pp.out" 2>&1 &&
    grep -q 'Summary: Latency' "$out/$name.pp.out" || { fail "ping-pong: $(tail -2 "$out/$name.pp.out")"; return 1; }
  under client sockperf throughput --tcp -i "$peer" -p 11111 -t 3 -m 65000 > "$out/$name.tp.out" 2>&1 &&
    grep -q 'Summary: BandWidth' "$out/$name.tp.out" || { fail "throughput: $(tail -2 "$out/$name.tp.out")"; return 1; }
}

# nginx's workers (nobody) cannot enter the shared directory: host 1 leaves the
# file's sha256 there instead.
nginx_server() {
  local www
  www=$(mktemp -d /tmp/nginx-www.XXXXXX)
  head -c 8388608 /dev/urandom > "$www/big"
  sha256sum < "$www/big" > "$shared/nginx.sha256"
  head -c 4096 /dev/urandom > "$www/small"
  chmod 755 "$www"
  chmod 644 "$www"/*
  "$here/nginx-conf" "$ip" 8088 "$www" > "$out/nginx.conf"
  serve 8088 nginx -c "$out/nginx.conf" -e stderr
}
nginx_client() {
  local i want got status=0
  want=$(cat "$shared/nginx.sha256")
  for i in 1 2 3; do
    got=$(under client curl -sf "http://$peer:8088/big" | sha256sum)
    [ "$got" = "$want" ] || { fail "curl $i: the 8 MiB file came back different"; status=1; }
  done
  # wrk keeps 16 connections busy through its window (window_rdma; wrk's -d is a limit
  # for hangs), then is stopped (SIGINT: it prints its results).
  under wrk wrk -t 2 -c 16 -d 600s --timeout 30s "http://$peer:8088/small" > "$out/$name.wrk.out" 2>&1 &
  local wrk=$!
  window_rdma wrk 16 || status=1
  pkill -INT -n -x wrk || { fail "wrk ended before its window was measured"; status=1; }
  wait $wrk && grep -q 'Requests/sec' "$out/$name.wrk.out" && ! grep -qE 'Non-2xx|Socket errors' "$out/$name.wrk.out" ||
    { fail "wrk: $(tail -3 "$out/$name.wrk.out")"; status=1; }
  return $status
}

program iperf3
program redis
program sockperf
program nginx

if [ "$host" = 2 ]; then
  printf '\n%-10s %-6s %9s %20s %20s %9s\n' program result upgraded "host1->2 TCP/RDMA" "host2->1 TCP/RDMA" "on RDMA"
  printf '%s\n' "${rows[@]}"
fi
verdict "cross-programs: host $host"
