#!/usr/bin/env bash
# Inside the test bed: the same blocking-socket scenarios on plain kernel TCP and under
# ferry over RDMA; every printed result must be identical, and ferry's counters must
# show each scenario's connection upgraded.
#   semantics.sh BUILD_DIR
set -uo pipefail
build=$1
ip=${TESTBED_IP:?run inside integration/testbed}
out=${VM_OUT:-/tmp}
"$build/stream_semantics" "$ip" > "$out/semantics.plain" 2>&1
SEMANTICS_STAT_CMD="env -u LD_PRELOAD -u FERRY_STATS -u FERRY_LOG_FILE $build/ferry stat" FERRY_STATS=1 FERRY_LOG_FILE="$out/semantics.ferry.log" \
  timeout 300 "$build/ferry" "$build/stream_semantics" "$ip" > "$out/semantics.ferry" 2>&1
cat "$out/semantics.ferry"
status=0
if ! diff -u "$out/semantics.plain" "$out/semantics.ferry"; then
  echo "FAIL: results differ between kernel TCP (-) and ferry (+)"
  status=1
fi
up=$(awk '$1 == "upgraded" {print $2}' "$out/semantics.ferry.log" | tail -1)
echo "connections upgraded under ferry: ${up:-0}"
[ "${up:-0}" -ge 18 ] || { echo "FAIL: expected 18 upgraded connection ends"; status=1; }
grep -q '^done' "$out/semantics.ferry" || status=1
exit $status
