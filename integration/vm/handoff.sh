#!/usr/bin/env bash
# Inside the test bed: a connection handed to another program in the middle of its
# stream (integration/programs/handoff.py): by exec, by SCM_RIGHTS to a helper
# process, and to a forked child (the parent closing its copy at once, or keeping it
# until the child is done, or the child execing a program that carries on). Differential: each runs on kernel TCP and then with both ends under ferry,
# and the client's line (byte counts and sha256 both ways) must be the same; under
# ferry the counters must show the bytes on RDMA before the hand-off and the
# connection handed back to TCP at both ends, with nothing reset.
#   handoff.sh BUILD_DIR
set -uo pipefail
build=$1
ip=${TESTBED_IP:?run inside integration/testbed}
out=${VM_OUT:-/tmp}
ferry=$build/ferry
prog=$(cd "$(dirname "$0")/../programs" && pwd)/handoff.py
export PATH=$PATH:/usr/sbin:/sbin
total=$((32 << 20))
port=7400
failures=0

fail() { echo "FAIL [$name]: $*"; failures=$((failures + 1)); }

# run SETUP MODE: one server and client, plain or both under ferry; the client's last line.
run() {
  local setup=$1 mode=$2 pre=()
  port=$((port + 1))
  rm -f "$out/$name".*.log
  [ "$setup" = ferry ] && pre=(env FERRY_STATS=1 FERRY_BACKTRACE=1 "FERRY_LOG_FILE=$out/$name.%p.log" "$ferry")
  "${pre[@]}" python3 "$prog" server "$ip" "$port" "$mode" > "$out/$name.$setup.server.out" 2>&1 &
  local server=$!
  for _ in $(seq 100); do grep -q listening "$out/$name.$setup.server.out" 2>/dev/null && break; sleep 0.1; done
  timeout 300 "${pre[@]}" python3 "$prog" client "$ip" "$port" "$total" > "$out/$name.$setup.client.out" 2>&1 ||
    fail "$setup client (status $?): $(tail -2 "$out/$name.$setup.client.out")"
  timeout 60 tail --pid=$server -f /dev/null || { kill $server; fail "$setup server did not finish"; }
  wait $server || fail "$setup server: $(tail -2 "$out/$name.$setup.server.out")"
  tail -1 "$out/$name.$setup.client.out"
}

# sum FIELD: over every counter printout of this scenario's processes, each file's
# largest value (a process that execs prints its counters first).
sum() {
  awk -v f="$1" '$1 == f && $2 > m[FILENAME] {m[FILENAME] = $2} END {for (k in m) s += m[k]; printf "%.0f", s}' \
    "$out/$name".*.log 2>/dev/null
}

for mode in exec pass fork forkwait forkexec; do
  name=$mode
  plain=$(run plain $mode)
  under=$(run ferry $mode)
  echo "[$name] kernel TCP: $plain"
  echo "[$name] ferry:      $under"
  [ "$plain" = "$under" ] || fail "results differ"
  case "$under" in *": same") ;; *) fail "the echo differs from what was sent" ;; esac
  [ "$(sum upgraded)" -ge 2 ] || fail "expected upgraded at both ends, $(sum upgraded)"
  [ "$(sum bytes_rdma_received)" -ge $((1 << 20)) ] || fail "only $(sum bytes_rdma_received) bytes over RDMA before the hand-off"
  [ "$(sum downgrades_handoff)" -ge 2 ] || fail "expected a hand-off at both ends, $(sum downgrades_handoff)"
  [ "$(sum downgrade_resets)" -eq 0 ] || fail "$(sum downgrade_resets) connection(s) reset"
  grep -hE ' (warn|error) |fatal' "$out/$name".*.log && fail "ferry logged warnings"
  echo "[$name] counters: upgraded $(sum upgraded), rdma bytes received $(sum bytes_rdma_received)," \
    "tcp bytes received $(sum bytes_tcp_received), handed off $(sum downgrades_handoff), resent $(sum bytes_resent)"
done
[ $failures -eq 0 ] && echo "handoff: all passed" || echo "handoff: $failures failure(s)"
[ $failures -eq 0 ]
