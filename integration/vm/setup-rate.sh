#!/usr/bin/env bash
# Inside the test bed: connection setup rate (connect_rate: connect, one byte each way,
# close) under kernel TCP and under ferry from each given build, both ends, the builds
# taking turns run by run; prints each one's median connections/s and its ratio to the
# first build. For a change that touches the handshake: the old build first.
#   setup-rate.sh RUNS SECONDS BUILD_DIR...
set -uo pipefail
runs=$1 secs=$2
shift 2
ip=${TESTBED_IP:?run inside integration/testbed}
out=${VM_OUT:-/tmp}
port=7900
declare -A rates
for r in $(seq "$runs"); do
  for b in plain "$@"; do
    port=$((port + 1))
    tool=${b/plain/$1}/connect_rate
    pre=()
    [ "$b" = plain ] || pre=("$b/ferry")
    "${pre[@]}" "$tool" server "$ip" $port > "$out/setup.server.out" 2>&1 &
    server=$!
    # Started when it listens, as its users would start their clients (under
    # emulation, loading rdma-core alone can take seconds).
    for _ in $(seq 300); do ss -ltn | grep -q ":$port " && break; sleep 0.1; done
    rate=$("${pre[@]}" "$tool" client "$ip" $port "$secs" 2>&1 | awk '/connections\/s/ {print $2}')
    kill $server 2>/dev/null
    wait $server 2>/dev/null
    rates[$b]+="${rate:-0} "
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
first=$(median <<< "${rates[$1]}")
printf '%-40s %14s %10s   %s\n' setup "connections/s" "ratio" "runs"
for b in plain "$@"; do
  m=$(median <<< "${rates[$b]}")
  printf '%-40s %14s %10s   %s\n' "$b" "$m" "$(awk -v a="$m" -v f="$first" 'BEGIN {printf "%.3f", (f > 0) ? a / f : 0}')" "${rates[$b]}"
done
