#!/usr/bin/env bash
# Inside the two-host test bed (integration/testbed --hosts 2), on both guests: one
# connection from host 2 to host 1 carries 16 MiB each way (stream_check.py, sha256
# checked on both ends), on kernel TCP and under ferry at both ends, first on a clean
# wire (and 16 connections at once, of odd sizes), then with RoCE's packets dropped
# mid-transfer (failover to TCP), then with host 2 sending no RTU (host 1's handshake
# never settles while host 2's connection cuts over) and with host 1 sending no RC
# acknowledgement (host 2's cutover is never confirmed), then with netem loss and delay
# on both guests' eth0, then with both links at MTU 1500 (RoCE MTU 1024) instead of
# 9000. Host 1 serves, host 2 connects; they meet in $TESTBED_SHARED, where each
# leaves its side's figures. Each host checks its own side; host 2 then prints the
# table of both.
#   cross-host.sh BUILD_DIR [matrix]
# With `matrix`, instead: the fault matrix, kernel TCP and ferry on each of several
# netem wires (loss 0.1%, 1%, 5%, delay with jitter, reordering, duplication) and at
# MTU 1500.
# Fails if a stream's bytes differ, if a connection under ferry did not upgrade or sent
# any of its stream's body on TCP, if the kernel's TCP byte count disagrees with ferry's, if
# netem dropped nothing on the lossy wire, or if the other host's side never showed up.
set -euo pipefail
# The test bed's commands start with PATH=/bin; tc lives in /usr/sbin.
PATH=$PATH:/usr/sbin:/sbin
build=$1
here=$(cd "$(dirname "$0")" && pwd)
host=${TESTBED_HOST:?run inside integration/testbed --hosts 2}
shared=${TESTBED_SHARED:?run inside integration/testbed --hosts 2}
out=${VM_OUT:-/tmp}
size=$((16 << 20))
# How many connections a scenario opens at once, and their sizes (cycled over them).
conns=1 sizes=("$size")
# Under ferry each side sends its 8-byte length, then the rest once its counters show
# every connection upgraded (stream_check's STREAM_FERRY): the stream itself crosses
# the wire the way the row says, however long the upgrade took. On the lossy wire a
# lost connect request or reply is resent only after rdma_cm's response timeout (4.6 s
# or more for RoCE): ferry's upgrade window (FERRY_UPGRADE_TIMEOUT_MS, 2 s by default,
# after which the server keeps the connection on TCP) covers three.
window=15000
loss="loss 1% delay 200us"
check="/usr/bin/python3 $here/stream_check.py"
source "$(dirname "$0")/common.sh"

say() { printf '%s\n' "$*"; }
fail() { failed_with "FAIL [$name] host $host: $*"; }

# shellcheck source=integration/vm/meet.sh
. "$here/meet.sh"

# counter FIELD: the value at exit in this side's ferry log (0 without one).
counter() { awk -v f="$1" '$1 == f {v = $2} END {print v + 0}' "$out/$name.$role.log" 2>/dev/null || echo 0; }
# kernel_sent: the kernel's own count of TCP bytes this side sent (tcp_info
# bytes_acked, where the SYN and FIN count one each once acknowledged), as
# stream_check printed it.
kernel_sent() { sed -n 's/.*kernel TCP bytes sent \([0-9]*\) received.*/\1/p' "$out/$name.$role.out"; }
# drops: packets netem has dropped on this guest's eth0.
drops() { tc -s qdisc show dev eth0 | sed -n 's/.*(dropped \([0-9]*\),.*/\1/p' | awk '{n += $1} END {print n + 0}'; }
# fact SIDE KEY: a figure of that side of this scenario, from the shared directory.
fact() { awk -v k="$2" '$1 == k {print $2}' "$shared/$name.$1"; }

# launch MODE ARGS...: this side's stream_check in the background (side_pid), under
# ferry when MODE is ferry.
launch() {
  local mode=$1
  shift
  local -a pre=()
  [ "$mode" = plain ] || pre=(env FERRY_STATS=1 FERRY_BACKTRACE=1 "FERRY_UPGRADE_TIMEOUT_MS=$window"
    "FERRY_LOG_FILE=$out/$name.$role.log" "STREAM_FERRY=$build/ferry" "$build/ferry")
  # A handshake that never settles at one end: no upgrade to wait for, the streams go
  # at once.
  case $mode in unsettled | unconfirmed)
    pre=(env FERRY_STATS=1 FERRY_BACKTRACE=1 FERRY_UPGRADE_TIMEOUT_MS=3000 FERRY_LOG=info
      "FERRY_LOG_FILE=$out/$name.$role.log" "$build/ferry") ;;
  esac
  [ "$mode" != unsettled ] || [ "$host" != 2 ] || rtu_drop
  [ "$mode" != unconfirmed ] || [ "$host" != 1 ] || ack_drop
  drops_before=$(drops) started=$SECONDS
  rm -f "$out/$name.$role.out"  # a wait for "listening" must not find the last one's
  timeout 300 "${pre[@]}" $check "$@" > "$out/$name.$role.out" 2>&1 &
  side_pid=$!
  [ "$mode" != cut ] || cut_when_sent $((2 << 20))
  [ "$fault" != flap ] || [ "$host" != 2 ] || flap_later
}

# flap_later: in the background, takes host 2's side of the wire down for 3 s, 2 s
# after the connection is established (inside the transfer), then waits until rxe0 is
# ACTIVE again.
flap_later() {
  (
    for _ in $(seq 600); do
      [ -z "$(ss -Htn state established "dport = :$port")" ] || break
      sleep 0.1
    done
    sleep 2
    ip link set dev eth0 down
    sleep 3
    ip link set dev eth0 up
    for _ in $(seq 100); do
      rdma link show rxe0/1 2>/dev/null | grep -q 'state ACTIVE' && break
      sleep 0.1
    done
    say "[$name] host $host: eth0 was down for 3 s"
  ) &
  flapper=$!
}

# roce_drop / roce_pass: RoCE v2's packets (UDP port 4791) dropped on this guest's side
# of the wire, TCP left alone; and undone.
roce_drop() {
  tc qdisc add dev eth0 root handle 1: prio &&
    tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff \
      action drop
}
roce_pass() { tc qdisc del dev eth0 root 2>/dev/null || true; }
# ack_drop: this guest sends no RC acknowledgement (BTH opcode 0x11): the other side's
# messages land here, and its queue pairs fail once their retries run out.
ack_drop() {
  tc qdisc add dev eth0 root handle 1: prio &&
    tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff \
      match u8 0x11 0xff at 28 action drop
}
# rtu_drop: this guest sends no RTU, rdma_cm's last connect message (a CM MAD, class 7,
# attribute 0x14, behind RoCE's BTH and DETH): its side of each connection is
# established, the other side's never is.
rtu_drop() {
  tc qdisc add dev eth0 root handle 1: prio &&
    tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff \
      match u8 0x07 0xff at 49 match u16 0x0014 0xffff at 64 action drop
}

# cut_when_sent BYTES: in the background, drops RoCE on this side once this side's
# stream_check has sent BYTES over RDMA (its live counters).
cut_when_sent() {
  (
    local pid sent=0
    for _ in $(seq 600); do
      pid=$(pgrep -f "^/usr/bin/python3 .*stream_check.py $role " | head -1 || true)
      [ -z "$pid" ] || sent=$("$build/ferry" stat "$pid" 2>/dev/null | awk '$1 == "bytes_rdma_sent" {print $2}' || true)
      [ "${sent:-0}" -ge "$1" ] && break
      sleep 0.2
    done
    roce_drop && say "[$name] host $host: RoCE dropped after ${sent:-0} bytes over RDMA"
  ) &
  cutter=$!
}

# conclude MODE: waits for this side's stream_check, checks this side, and leaves its
# figures in the shared directory.
conclude() {
  local mode=$1 status=0 tcp rdma=0 upgraded=- before
  wait $side_pid || status=$?
  [ "$status" -eq 0 ] || fail "stream_check $role exited $status: $(tail -3 "$out/$name.$role.out")"
  tcp=$(kernel_sent)
  [ "$fault" != flap ] || [ "$host" != 2 ] || wait $flapper || true
  if [ "$mode" = cut ] || { [ "$mode" = ferry ] && [ "$fault" = flap ]; }; then
    # The path died under the transfer (for good, or for a while: the queue pairs may
    # or may not have run out of retries): the connection went back to TCP and
    # finished there, or stayed on RDMA.
    [ "$mode" != cut ] || { wait $cutter || true; roce_pass; }
    upgraded=$(counter upgraded) rdma=$(counter bytes_rdma_sent) before=$(counter bytes_tcp_sent)
    [ "$upgraded" -eq 1 ] || fail "$role: $upgraded connections upgraded, expected 1"
    local downs=$(($(counter downgrades_failover) + $(counter downgrades_peer)))
    [ "$downs" -eq 1 ] || { [ "$fault" = flap ] && [ "$downs" -eq 0 ]; } ||
      fail "$role: $(counter downgrades_failover) + $(counter downgrades_peer) downgrades, expected 1"
    [ "$before" -gt 0 ] && [ "${tcp:-0}" -ge "$before" ] ||
      fail "$role: kernel TCP carried ${tcp:-no} bytes, ferry counted $before"
    say "[$name] $role: $rdma bytes over RDMA, $before on TCP ($(counter bytes_resent) resent)," \
      "$(counter downgrades_failover) + $(counter downgrades_peer) downgrades"
  elif [ "$mode" = unsettled ] || [ "$mode" = unconfirmed ]; then
    # The connection went on over TCP at both ends, every byte intact (stream_check's
    # status above), by the path the scenario is about (ferry's log at that end).
    roce_pass
    local at=1 line="the client cut over on a handshake that did not settle here"
    [ "$mode" = unsettled ] || at=2 line="our cutover was never confirmed"
    [ "$host" != "$at" ] || grep -q "$line" "$out/$name.$role.log" || fail "$role: never logged \"$line\""
    rdma=$(counter bytes_rdma_sent)
  elif [ "$mode" = ferry ]; then
    upgraded=$(counter upgraded) rdma=$(counter bytes_rdma_sent) before=$(counter bytes_tcp_sent)
    [ "$upgraded" -eq "$conns" ] || fail "$role: $upgraded connections upgraded, expected $conns"
    [ "$rdma" -ge "$total" ] || fail "$role: only $rdma of $total bytes sent over RDMA (want all)"
    # (the SYN and the FIN of each connection count one each once acknowledged)
    [ "${tcp:-0}" -ge "$before" ] && [ "${tcp:-0}" -le $((before + 2 * conns)) ] ||
      fail "$role: kernel TCP carried ${tcp:-no} bytes, ferry counted $before before the cutover"
  else
    [ "${tcp:-0}" -ge "$total" ] || fail "$role: kernel TCP carried ${tcp:-no} bytes, expected all $total"
  fi
  printf 'status %s\nupgraded %s\ntcp %s\nrdma %s\ndrops %s\nseconds %s\n' "$status" "$upgraded" \
    "${tcp:--}" "$rdma" $(($(drops) - drops_before)) $((SECONDS - started)) > "$shared/$name.$role.tmp"
  mv "$shared/$name.$role.tmp" "$shared/$name.$role"
  say "[$name] $role: $(tail -1 "$out/$name.$role.out")"
}

# Host 1: listen, tell host 2 the port once listening, serve one connection.
serve() {
  role=server
  launch "$1" server "$TESTBED_IP" "$2" "$conns"
  # stream_check prints "listening" once its socket (and ferry's rdma_cm listener) is up.
  for _ in $(seq 100); do
    grep -q listening "$out/$name.server.out" 2>/dev/null && break
    kill -0 $side_pid 2>/dev/null || break
    sleep 0.1
  done
  echo "$2" > "$shared/$name.ready"
  conclude "$1"
}

# Host 2: wait for host 1's port, connect, then for host 1's figures.
connect() {
  role=client
  if ! wait_for 120 "$shared/$name.ready"; then
    fail "host 1 never listened"
    return
  fi
  # A failover run sends more, so that the cut surely falls inside the transfer.
  local -a n=("${sizes[@]}")
  [ "$1" != cut ] && [ "$fault" != flap ] || n=($((4 * size)))
  launch "$1" client "$TESTBED_PEER_IP" "$(cat "$shared/$name.ready")" "$conns" "${n[@]}"
  conclude "$1"
  wait_for 120 "$shared/$name.server" || fail "host 1 never reported its side"
}

port=7100 names=() fault=""
declare -A wire_of
# scenario NAME MODE [WIRE]: one transfer on the wire as it is now (described as WIRE
# in the table), this host's side.
scenario() {
  name=$1
  port=$((port + 1))
  local i
  total=0
  for ((i = 0; i < conns; i++)); do total=$((total + sizes[i % ${#sizes[@]}])); done
  names+=("$name")
  wire_of[$name]=${3:-clean}
  if [ "$host" = 1 ]; then serve "$2" $port; else connect "$2"; fi
}

# on_wire LABEL NETEM...: kernel TCP, then ferry, with netem impairing both guests'
# sending side (so that both directions meet it).
on_wire() {
  local label=$1
  shift
  tc qdisc add dev eth0 root netem "$@"
  scenario "tcp-$label" plain "$*"
  scenario "ferry-$label" ferry "$*"
  # netem drops packets as the stack hands them over, before GSO splits a large TCP
  # segment (up to 64 KiB) into the wire's: kernel TCP meets few losses, while RoCE's
  # packets (4 KiB each) meet about the rate asked for.
  case "$*" in *loss*) [ "$(drops)" -gt 0 ] || fail "netem dropped no packet on this host's side of the wire" ;; esac
  tc qdisc del dev eth0 root
}

# on_mtu MTU: kernel TCP, then ferry, with both guests' links at MTU (9000 otherwise);
# RoCE's path MTU follows the link's (1024 at 1500).
on_mtu() {
  ip link set dev eth0 mtu "$1"
  say "[mtu$1] host $host: eth0 mtu $1, rxe0 $(ibv_devinfo -d rxe0 2>/dev/null | awk '$1 == "active_mtu:" {print $2, $3}')"
  scenario "tcp-mtu$1" plain "MTU $1"
  scenario "ferry-mtu$1" ferry "MTU $1"
  ip link set dev eth0 mtu 9000
}

# Where each side's bytes went: TCP is the kernel's count, RDMA ferry's. The time is
# the client's whole run, settling included.
table() {
  local format='%-18s %-28s %-7s %-9s %-20s %-20s %-12s %s\n' h1 h2
  printf "\n$format" scenario wire intact upgraded "host1->2 TCP/RDMA" "host2->1 TCP/RDMA" \
    "drops h1/h2" seconds
  for name in "${names[@]}"; do
    [ -e "$shared/$name.server" ] && [ -e "$shared/$name.client" ] || { printf '%-18s (no figures)\n' "$name"; continue; }
    h1=$(fact server status) h2=$(fact client status)
    # shellcheck disable=SC2059 # the format is the table's
    printf "$format" "$name" "${wire_of[$name]}" "$([ "$h1$h2" = 00 ] && echo yes || echo NO)" \
      "$(fact server upgraded)/$(fact client upgraded)" "$(fact server tcp)/$(fact server rdma)" \
      "$(fact client tcp)/$(fact client rdma)" "$(fact server drops)/$(fact client drops)" "$(fact client seconds)"
  done
}

# fault_run MODE ROLE TAG: peer_fault.py's ROLE as MODE (plain or ferry), meeting the
# other host under $shared/TAG-MODE; its output in $out/TAG-MODE.out.
fault_run() {
  local mode=$1 role=$2 tag=$3-$1
  local -a pre=()
  [ "$mode" = plain ] || pre=(env FERRY_STATS=1 FERRY_BACKTRACE=1 "FERRY_LOG_FILE=$out/$tag.log"
    "FAULT_STAT_CMD=env -u LD_PRELOAD -u FERRY_STATS -u FERRY_LOG_FILE $build/ferry stat" "$build/ferry")
  timeout 400 "${pre[@]}" /usr/bin/python3 "$here/peer_fault.py" "$role" "$ip" "$fport" "$shared/$tag" \
    > "$out/$tag.out" 2>&1
}

# compare TAG: the survivor's lines on kernel TCP and under ferry must be the same, and
# under ferry its two connections must have upgraded.
compare() {
  local tag=$1 up
  name=$tag
  say "[$tag] host $host: kernel TCP | ferry"
  paste -d'|' "$out/$tag-plain.out" "$out/$tag-ferry.out" | sed 's/^/    /'
  grep -q HANG "$out/$tag-plain.out" "$out/$tag-ferry.out" && fail "a call never returned"
  diff -q "$out/$tag-plain.out" "$out/$tag-ferry.out" > /dev/null || fail "ferry's lines differ from kernel TCP's"
  up=$(awk '$1 == "upgraded" {v = $2} END {print v + 0}' "$out/$tag-ferry.log" 2>/dev/null || echo 0)
  [ "$up" -eq 2 ] || fail "under ferry $up connections upgraded, expected 2"
}

# peer_killed MODE: host 2's program is killed (SIGKILL) while host 1's is blocked in
# calls on their two connections; host 1 reports what its calls returned.
peer_killed() {
  local mode=$1 victim status=0
  fport=$((port += 1))
  if [ "$host" = 1 ]; then
    ip=$TESTBED_IP
    fault_run "$mode" kill-survivor kill || status=$?
    [ "$status" -eq 0 ] || say "[kill-$mode] host 1: peer_fault exited $status: $(tail -2 "$out/kill-$mode.out")"
  else
    ip=$TESTBED_PEER_IP
    # (its shell would report the kill on stderr: the point of the scenario, not news)
    fault_run "$mode" kill-victim kill 2>/dev/null &
    victim=$!
    wait_for 300 "$shared/kill-$mode.blocked" || { name=kill-$mode; fail "host 1 never blocked"; }
    sleep 0.5
    # The program itself (not the timeout around it), as a process that dies.
    pkill -9 -f "^/usr/bin/python3 $here/peer_fault.py kill-victim .* $shared/kill-$mode\$" || true
    wait $victim || true
  fi
}

# vanish: host 1 serves two connections under kernel TCP and two under ferry, and once
# host 2's calls on them block, host 1's guest is stopped at once (the test bed's
# vanish request), as a machine that loses power; host 2 reports what its calls
# returned. Host 1's command never returns.
vanish() {
  local mode
  fport=$((port += 1))
  if [ "$host" = 1 ]; then
    ip=$TESTBED_IP
    for mode in plain ferry; do
      fault_run $mode vanish-server vanish &
      fport=$((fport + 1))
    done
    wait_for 300 "$shared/vanish-plain.blocked" && wait_for 300 "$shared/vanish-ferry.blocked" ||
      { name=vanish; fail "host 2 never blocked"; return; }
    sleep 0.5
    say "[vanish] host 1: vanishing"
    sync
    touch "$shared/.vanish.1"
    sleep 600
  else
    ip=$TESTBED_PEER_IP
    local -a pids=()
    for mode in plain ferry; do
      fault_run $mode vanish-survivor vanish &
      pids+=($!)
      fport=$((fport + 1))
    done
    for p in "${pids[@]}"; do wait "$p" || true; done
    compare vanish
  fi
}

if [ "${2:-}" = vanish ]; then
  vanish
elif [ "${2:-}" = peers ]; then
  # The wire or the peer fails under live connections (ctest -L faults): eth0 down
  # for 3 s mid-transfer; the peer process killed; the peer host gone. Last, since
  # it stops host 1.
  fault=flap
  scenario tcp-flap plain "eth0 down 3 s mid-way"
  scenario ferry-flap ferry "eth0 down 3 s mid-way"
  fault=""
  peer_killed plain
  peer_killed ferry
  [ "$host" != 1 ] || compare kill
  vanish
elif [ "${2:-}" = matrix ]; then
  # The fault matrix (ctest -L faults): kernel TCP and ferry side by side on each wire.
  on_wire loss0.1 loss 0.1% delay 200us
  on_wire loss1 loss 1% delay 200us
  on_wire loss5 loss 5% delay 200us
  on_wire jitter delay 1ms 500us
  on_wire reorder delay 1ms reorder 25% 50%
  on_wire dup duplicate 1% delay 200us
  on_mtu 1500
else
  scenario tcp-clean plain
  scenario ferry-clean ferry
  # Many connections at once, of odd sizes (one byte to 4 MiB and a bit).
  conns=16 sizes=(1000003 1 4194311 65537 299993)
  scenario tcp-many plain "16 connections"
  scenario ferry-many ferry "16 connections"
  conns=1 sizes=("$size")
  # Failover: RoCE's packets dropped on both guests mid-transfer, TCP untouched. The
  # queue pairs fail once their retries run out; the connection goes back to TCP.
  scenario ferry-cut cut "RoCE cut mid-way"
  # Host 2 sends no RTU: its connection is established and cuts over, host 1's never
  # settles (FERRY_UPGRADE_TIMEOUT_MS 3 s), and it must not read the client's proof and
  # downgrade header as stream bytes.
  scenario ferry-unsettled unsettled "host 2 sends no RTU"
  # Host 1 sends no RC acknowledgement: host 2's cutover is never confirmed, its queue
  # pair fails, and its bytes go on over TCP with nothing past the cutover point.
  scenario ferry-unconfirmed unconfirmed "host 1 sends no RC ack"
  on_wire loss $loss
  on_mtu 1500
fi

if [ "$host" = 2 ]; then table | tee "$out/table.txt"; fi
verdict "cross-host: host $host"
