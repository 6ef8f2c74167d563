#!/usr/bin/env bash
# Inside the test bed: one-way latency of small messages, side by side in one boot:
# raw verbs (ib_write_lat -R), kernel TCP (NPtcp) and ferry (NPtcp, both ends under
# ferry, over RDMA). Medians of RUNS runs. Prints a table; never fails on a number.
#   latency.sh BUILD_DIR [RUNS]
set -uo pipefail
build=$1
runs=${2:-3}
ip=${TESTBED_IP:?run inside integration/testbed}
cd /tmp

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

verbs() {  # t_typical of 64-byte RDMA WRITE, usec
  ib_write_lat -R -s 64 -n 2000 > /dev/null 2>&1 &
  local s=$!
  sleep 1
  ib_write_lat -R -s 64 -n 2000 "$ip" 2>/dev/null | awk '$1 == 64 {print $5}'
  wait $s
}

nptcp() {  # NPtcp one-way time for 64-byte messages, usec; $1 = "" or the ferry launcher
  local pre=$1
  $pre NPtcp -l 64 -u 64 > /dev/null 2>&1 &
  local s=$!
  sleep 1
  $pre NPtcp -h "$ip" -l 64 -u 64 -o /tmp/np.lat > /dev/null 2>&1
  wait $s
  awk '$1 == 64 {print $3 * 1e6; exit}' /tmp/np.lat
}

for i in $(seq "$runs"); do
  verbs >> /tmp/lat.verbs
  nptcp "" >> /tmp/lat.tcp
  nptcp "$build/ferry" >> /tmp/lat.ferry
  FERRY_POLL_US=1000 nptcp "$build/ferry" >> /tmp/lat.spin
done
v=$(median < /tmp/lat.verbs); t=$(median < /tmp/lat.tcp); f=$(median < /tmp/lat.ferry); p=$(median < /tmp/lat.spin)
printf '\n64-byte one-way latency, usec, median of %d runs (Soft-RoCE under TCG: compare ratios only)\n' "$runs"
printf '%-34s %10s\n' "raw verbs (ib_write_lat)" "$v" "kernel TCP (NPtcp)" "$t" "ferry (NPtcp)" "$f" \
  "ferry, FERRY_POLL_US=1000 (NPtcp)" "$p"
awk -v v="$v" -v t="$t" -v f="$f" -v p="$p" 'BEGIN {
  printf "ferry / raw verbs %8.2f   (FERRY_POLL_US=1000: %.2f)\n", f / v, p / v
  printf "ferry / kernel TCP %7.2f   (FERRY_POLL_US=1000: %.2f)\n", f / t, p / t }'
