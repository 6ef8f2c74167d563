#!/usr/bin/env bash
# Inside the test bed: the same socket scenarios on plain kernel TCP and under ferry
# over RDMA; every printed result must be identical, and ferry's counters must show
# the scenarios' connections upgraded.
#   semantics.sh BUILD_DIR PROGRAM MIN_UPGRADED
#   (stream_semantics: blocking calls; readiness_semantics: epoll, poll, select;
#   thread_semantics: threads on one socket, buffering, fork)
# In the two-host bed (--hosts 2), PROGRAM is cross_semantics: host 1 serves, host 2
# connects, each compares its own end's results; the two runs meet over their control
# connection (host 2's retries until host 1 listens).
set -uo pipefail
build=$1
prog=${2:-stream_semantics}
min=${3:-18}
ip=${TESTBED_IP:?run inside integration/testbed}
out=${VM_OUT:-/tmp}
args=("$ip")
if [ "${TESTBED_HOSTS:-1}" = 2 ]; then
  args=(serve "$ip")
  [ "$TESTBED_HOST" = 1 ] || args=(connect "$TESTBED_PEER_IP")
fi
# The verdict counts upgrades, so the upgrade window (FERRY_UPGRADE_TIMEOUT_MS, 2 s by
# default, after which a connection stays on TCP) is a limit for hangs here, not a race
# with a loaded machine (a connection used at once, with the bed's CPUs shared, missed
# it).
# Results go to stdout and are compared; figures for the log go to stderr.
timeout 400 "$build/$prog" "${args[@]}" > "$out/$prog.plain" 2> "$out/$prog.plain.err"
SEMANTICS_STAT_CMD="env -u LD_PRELOAD -u FERRY_STATS -u FERRY_LOG_FILE $build/ferry stat" FERRY_STATS=1 FERRY_UPGRADE_TIMEOUT_MS=30000 \
  FERRY_LOG_FILE="$out/$prog.ferry.log" timeout 400 "$build/ferry" "$build/$prog" "${args[@]}" > "$out/$prog.ferry" 2> "$out/$prog.ferry.err"
cat "$out/$prog.ferry"
echo "kernel TCP: $(cat "$out/$prog.plain.err")"
echo "ferry:      $(cat "$out/$prog.ferry.err")"
status=0
if ! diff -u "$out/$prog.plain" "$out/$prog.ferry"; then
  echo "FAIL: results differ between kernel TCP (-) and ferry (+)"
  status=1
fi
up=$(awk '$1 == "upgraded" {print $2}' "$out/$prog.ferry.log" | tail -1)
echo "connection ends upgraded under ferry: ${up:-0}"
last() { awk -v f="$1" '$1 == f {v = $2} END {print v + 0}' "$out/$prog.ferry.log"; }
echo "bytes this end sent under ferry: $(last bytes_rdma_sent) over RDMA, $(last bytes_tcp_sent) on TCP"
[ "${up:-0}" -ge "$min" ] || { echo "FAIL: expected at least $min upgraded connection ends"; status=1; }
grep -q '^done' "$out/$prog.ferry" || status=1
grep -E ' (warn|error) ' "$out/$prog.ferry.log" && { echo "FAIL: ferry logged warnings"; status=1; }
exit $status
