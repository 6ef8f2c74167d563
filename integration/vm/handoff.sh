#!/usr/bin/env bash
# Inside the test bed: a connection handed to another program in the middle of its
# stream (integration/programs/handoff.py): by exec, by SCM_RIGHTS to a helper
# process, and to a forked child (the parent closing its copy at once, or keeping it
# until the child is done, or the child execing a program that carries on), and by
# SCM_RIGHTS or exec after the connection failed over to TCP (its RDMA path cut while
# the server waits to hand over). Differential: each runs on kernel TCP and then with
# both ends under ferry, and the client's line (byte counts and sha256 both ways) must
# be the same; under ferry the counters must show the bytes on RDMA before the hand-off
# (the client sends its bulk once its connection upgraded: nearly all of the first
# 8 MiB, on any machine) and the connection handed back to TCP at both ends (or failed
# over), with nothing reset.
#   handoff.sh BUILD_DIR [MODE...]
set -uo pipefail
build=$1
ip=${TESTBED_IP:?run inside integration/testbed}
out=${VM_OUT:-/tmp}
ferry=$build/ferry
prog=$(cd "$(dirname "$0")/../programs" && pwd)/handoff.py
export PATH=$PATH:/usr/sbin:/sbin
total=$((32 << 20))
port=7400
source "$(dirname "$0")/common.sh"

fail() { failed_with "FAIL [$name]: $*"; }

# cut SETUP: once the server has echoed half, the link rxe0 sits on goes down (its
# queue pairs fail, TCP goes on through lo) until the client's connection has failed
# over, then up again; then the server may hand the connection over ($HANDOFF_GO).
cut() {
  local setup=$1 pid failed
  for _ in $(seq 600); do grep -q echoed "$out/$name.$setup.server.out" 2>/dev/null && break; sleep 0.1; done
  if [ "$setup" = ferry ]; then
    ip link set veth0 down
    for _ in $(seq 300); do
      pid=$(pgrep -n -f "handoff.py client $ip $port " || true)
      failed=$("$ferry" stat "$pid" 2>/dev/null | awk '$1 == "downgrades_failover" {print $2}' || true)
      [ "${failed:-0}" -ge 1 ] && break
      sleep 0.1
    done
    ip link set veth0 up
    for _ in $(seq 50); do rdma link show rxe0/1 2>/dev/null | grep -q 'state ACTIVE' && break; sleep 0.2; done
  fi
  touch "$HANDOFF_GO"
}

# run SETUP MODE: one server and client, plain or both under ferry; the client's last line.
run() {
  local setup=$1 mode=$2 pre=() cutter=
  port=$((port + 1))
  rm -f "$out/$name".*.log "$HANDOFF_GO" "$out/$name.$setup.server.out"
  # Under ferry the client sends its bulk once the connection upgraded (HANDOFF_FERRY).
  [ "$setup" = ferry ] && pre=(env FERRY_STATS=1 FERRY_BACKTRACE=1 "FERRY_LOG_FILE=$out/$name.%p.log" "HANDOFF_FERRY=$ferry" "$ferry")
  "${pre[@]}" python3 "$prog" server "$ip" "$port" "$mode" > "$out/$name.$setup.server.out" 2>&1 &
  local server=$!
  for _ in $(seq 100); do grep -q listening "$out/$name.$setup.server.out" 2>/dev/null && break; sleep 0.1; done
  case $mode in cut*) cut "$setup" & cutter=$! ;; esac
  timeout 300 "${pre[@]}" python3 "$prog" client "$ip" "$port" "$total" > "$out/$name.$setup.client.out" 2>&1 ||
    fail "$setup client (status $?): $(tail -2 "$out/$name.$setup.client.out")"
  [ -z "$cutter" ] || wait $cutter
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

# The cut modes run last: connections made right after the link comes back do not
# upgrade.
export HANDOFF_GO=$out/handoff.go
modes=("${@:2}")
[ ${#modes[@]} -gt 0 ] || modes=(exec pass fork forkwait forkexec cutpass cutexec)
for mode in "${modes[@]}"; do
  name=$mode
  plain=$(run plain $mode)
  under=$(run ferry $mode)
  echo "[$name] kernel TCP: $plain"
  echo "[$name] ferry:      $under"
  [ "$plain" = "$under" ] || fail "results differ"
  case "$under" in *": same") ;; *) fail "the echo differs from what was sent" ;; esac
  [ "$(sum upgraded)" -ge 2 ] || fail "expected upgraded at both ends, $(sum upgraded)"
  [ "$(sum bytes_rdma_received)" -ge $((1 << 20)) ] || fail "only $(sum bytes_rdma_received) bytes over RDMA before the hand-off"
  case $mode in
    cut*) [ "$(sum downgrades_failover)" -ge 1 ] || fail "expected a failover, $(sum downgrades_failover)" ;;
    *) [ "$(sum downgrades_handoff)" -ge 2 ] || fail "expected a hand-off at both ends, $(sum downgrades_handoff)" ;;
  esac
  [ "$(sum downgrade_resets)" -eq 0 ] || fail "$(sum downgrade_resets) connection(s) reset"
  grep -hE ' (warn|error) |fatal' "$out/$name".*.log && fail "ferry logged warnings"
  echo "[$name] counters: upgraded $(sum upgraded), rdma bytes received $(sum bytes_rdma_received)," \
    "tcp bytes received $(sum bytes_tcp_received), handed off $(sum downgrades_handoff)," \
    "failed over $(sum downgrades_failover), resent $(sum bytes_resent)"
done
verdict handoff
