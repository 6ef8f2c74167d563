#!/usr/bin/env bash
# Inside the test bed: byte streams through ferry over RDMA, and every way a connection
# stays on TCP. Each scenario runs stream_check.py (blocking sockets, both directions
# at once, sha256 per stream) and then reads ferry's counters and the kernel's TCP
# segment counts to prove where the bytes went.
#   rdma-stream.sh BUILD_DIR [SCENARIO...]
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
build=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
ip=${TESTBED_IP:?run inside integration/testbed}
out=${VM_OUT:-/tmp}
ferry=$build/ferry
check="/usr/bin/python3 $here/stream_check.py"
port=7000
source "$(dirname "$0")/common.sh"

say() { printf '%s\n' "$*"; }
fail() { failed_with "FAIL [$scenario]: $*"; }

# counter SIDE FIELD: the value at exit of the process that ran as SIDE (the largest
# printed: its forked children print theirs, counted from zero, to the same log).
counter() { awk -v f="$2" '$1 == f && $2 > v {v = $2} END {print v + 0}' "$out/$scenario.$1.log" 2>/dev/null || echo 0; }
# kernel SIDE WHICH: the kernel's count of TCP payload bytes (tcp_info) the side's
# connections sent ("sent") or received ("received"), as stream_check printed it.
kernel() { sed -n "s/.*kernel TCP bytes sent \([0-9]*\) received \([0-9]*\).*/\1 \2/p" "$out/$scenario.$1.out" | \
  awk -v w="$2" '{print (w == "sent") ? $1 : $2}'; }

# pair SERVER_MODE CLIENT_MODE CONNECTIONS SERVER_IP SIZES...: MODE is ferry, plain, or
# "ferry VAR=value..." for extra settings. STREAM_* variables reach both sides
# (stream_check.py); PAIR_WRAP is a command both sides run under, and PAIR_LOGS a
# directory it may write ferry's logs to.
pair() {
  local smode=$1 cmode=$2 conns=$3 sip=$4
  shift 4
  port=$((port + 1))
  local logs=${PAIR_LOGS:-$out}
  local -a spre=() cpre=() wrap=(${PAIR_WRAP:-})
  [ "${smode%% *}" = ferry ] && spre=(env FERRY_STATS=1 FERRY_BACKTRACE=1 FERRY_LOG=${FERRY_LOG:-warn} "FERRY_LOG_FILE=$logs/$scenario.server.log" ${smode#ferry} "$ferry")
  [ "${cmode%% *}" = ferry ] && cpre=(env FERRY_STATS=1 FERRY_BACKTRACE=1 "FERRY_LOG_FILE=$logs/$scenario.client.log" ${cmode#ferry} "$ferry")
  # The outputs too: the wait below for "listening" must not find the last pair's (the
  # server's shell opens its own only once it runs).
  rm -f "$out/$scenario".*.log "$logs/$scenario".*.log "$out/$scenario.server.out" "$out/$scenario.client.out"
  STREAM_SETTLE="${STREAM_SETTLE:-0}" "${wrap[@]}" "${spre[@]}" $check server "$sip" "$port" "$conns" > "$out/$scenario.server.out" 2>&1 &
  local server=$!
  for _ in $(seq 100); do grep -q listening "$out/$scenario.server.out" 2>/dev/null && break; sleep 0.1; done
  [ -z "${PAIR_BEFORE_CLIENT:-}" ] || $PAIR_BEFORE_CLIENT "$sip" "$port"
  local during=""
  if [ -n "${PAIR_DURING_CLIENT:-}" ]; then
    $PAIR_DURING_CLIENT "$server" "$port" "$conns" &
    during=$!
  fi
  if ! timeout 300 env STREAM_SETTLE="${STREAM_SETTLE:-0}" "${wrap[@]}" "${cpre[@]}" $check client "$sip" "$port" "$conns" "$@" > "$out/$scenario.client.out" 2>&1; then
    fail "client (status $?): $(tail -3 "$out/$scenario.client.out")"
  fi
  [ -z "$during" ] || wait $during
  if ! timeout 60 tail --pid=$server -f /dev/null; then
    kill $server 2>/dev/null
    fail "server did not finish"
  fi
  wait $server || fail "server: $(tail -3 "$out/$scenario.server.out")"
  [ "$logs" = "$out" ] || cp "$logs/$scenario".*.log "$out/" 2>/dev/null
  say "[$scenario] $(tail -1 "$out/$scenario.client.out")"
}

expect() {  # expect SIDE FIELD OP VALUE
  local v
  v=$(counter "$1" "$2")
  if ! [ "$v" "$3" "$4" ]; then
    fail "$1 $2 = $v, expected $3 $4"
    grep -v '^ ' "$out/$scenario.$1.log" 2>/dev/null | tail -20 | sed "s/^/[$scenario] $1 log: /"
  fi
}

# Where the bytes went: ferry's counters add up to the whole stream, the kernel's own
# TCP byte counts are exactly the bytes ferry sent before the cutover, and at least
# MIN_RDMA bytes (all of the streams' by default: with STREAM_FERRY each side sends its
# body once every connection upgraded, on any machine) went over RDMA.
expect_rdma() {  # expect_rdma STREAM_BYTES_EACH_WAY CONNECTIONS [MIN_RDMA]
  local side k f r conns=$2 least=${3:-$1}
  for side in client server; do
    k=$(kernel $side sent)
    f=$(counter $side bytes_tcp_sent)
    r=$(counter $side bytes_rdma_sent)
    # tcp_info counts a FIN as one byte acknowledged
    [ "$k" -ge "$f" ] && [ "$k" -le $((f + 2 * conns)) ] ||
      fail "$side: kernel TCP carried $k bytes, ferry counted $f before the cutover"
    [ $((f + r)) -ge "$1" ] || fail "$side: $f + $r bytes sent, expected at least $1"
    [ "$r" -ge "$least" ] || fail "$side: only $r of $1 bytes went over RDMA (want $least)"
    say "[$scenario] $side sent $f bytes on kernel TCP (before the cutover) and $r over RDMA"
  done
}

scenario_integrity_one() {
  STREAM_FERRY=$ferry pair ferry ferry 1 "$ip" $((64 << 20))
  expect client upgraded -eq 1
  expect server upgraded -eq 1
  expect_rdma $((64 << 20)) 1
}

# 64 connections at once: the upgrade window is a limit for a hang (60 s), not a race
# the burst must win on a slow machine.
scenario_integrity_many() {
  local s="ferry FERRY_UPGRADE_TIMEOUT_MS=60000"
  STREAM_FERRY=$ferry pair "$s" "$s" 64 "$ip" 1 7 4093 65537 1000003 262147 3000017 4096 131072
  expect client upgraded -eq 64
  expect server upgraded -eq 64
  expect_rdma 30000000 64
}

# A server that polls its sockets with non-blocking receives while its clients cut
# over, every empty look of ferry's at a socket stretched by 20 ms (slow_peek.c): each
# client's proof arrives between a look that found nothing and the read after it, and
# must not be taken as the stream's bytes. Every connection upgrades, every byte intact.
scenario_peek_race() {
  STREAM_SPIN=1 STREAM_FERRY=$ferry pair "ferry LD_PRELOAD=$build/libslow_peek.so SLOW_PEEK_MS=20" ferry 4 "$ip" 1000003
  expect client upgraded -eq 4
  expect server upgraded -eq 4
  expect server upgrades_forged -eq 0
  expect_rdma 1000003 4
}

# A server that asks select(), poll(), epoll or FIONREAD about its connection while its
# client, done talking, has cut over and written its proof, and its own handshake has
# not settled yet (its poller goes on 300 ms late after each wake: slow_poller.c):
# kernel TCP finds nothing to read, and so must ferry (iperf3's server, told its
# control connection was readable, blocked in its read while its client waited).
scenario_proof_select() {
  local prog="$here/../programs/proof_select.py" mode server way
  for way in select poll epoll fionread; do
    for mode in plain ferry; do
      port=$((port + 1))
      local -a spre=() cpre=()
      if [ "$mode" = ferry ]; then
        spre=(env FERRY_STATS=1 "FERRY_LOG_FILE=$out/$scenario.server.log" "LD_PRELOAD=$build/libslow_poller.so" "$ferry")
        cpre=(env FERRY_STATS=1 "FERRY_LOG_FILE=$out/$scenario.client.log" "$ferry")
        rm -f "$out/$scenario".*.log
      fi
      rm -f "$out/$scenario.$mode.server.err"  # the wait below must not find the last one's
      timeout 60 "${spre[@]}" /usr/bin/python3 "$prog" server "$ip" $port $way > "$out/$scenario.$mode.server.out" \
        2> "$out/$scenario.$mode.server.err" &
      server=$!
      for _ in $(seq 100); do grep -q listening "$out/$scenario.$mode.server.err" 2>/dev/null && break; sleep 0.1; done
      timeout 60 "${cpre[@]}" /usr/bin/python3 "$prog" client "$ip" $port > "$out/$scenario.$mode.client.out" 2>&1 ||
        fail "$way $mode client: $(tail -2 "$out/$scenario.$mode.client.out")"
      wait $server || fail "$way $mode server: $(tail -2 "$out/$scenario.$mode.server.err")"
      cat "$out/$scenario.$mode.server.out" "$out/$scenario.$mode.client.out" > "$out/$scenario.$way.$mode"
    done
    diff "$out/$scenario.$way.plain" "$out/$scenario.$way.ferry" > "$out/$scenario.$way.diff" ||
      fail "$way: ferry's lines differ from kernel TCP's: $(grep '^[<>]' "$out/$scenario.$way.diff" | tr '\n' ' ')"
    expect server upgraded -eq 1
    expect client upgraded -eq 1
    say "[$scenario] $(grep "$way" "$out/$scenario.$way.ferry")"
  done
}

# Ends with different FERRY_RING_SIZE, each way round: both rings are the smaller end's
# (protocol 8), and every byte arrives intact over RDMA.
scenario_ring_sizes() {
  local big="ferry FERRY_RING_SIZE=1m" small="ferry FERRY_RING_SIZE=16k"
  STREAM_FERRY=$ferry pair "$big" "$small" 2 "$ip" $((8 << 20)) 65537
  expect client upgraded -eq 2
  expect server upgraded -eq 2
  expect_rdma $((8 << 20)) 2
  STREAM_FERRY=$ferry pair "$small" "$big" 2 "$ip" $((8 << 20)) 65537
  expect client upgraded -eq 2
  expect server upgraded -eq 2
  expect_rdma $((8 << 20)) 2
}

# The rules file (FERRY_RULES): a server port a rule keeps on TCP (its connections count
# as tcp_rule, upgrade nowhere, and arrive intact) beside one that upgrades with the ring
# a rule gives it (its registered memory is that ring's), and a client program a rule
# names by its path kept on TCP against a server under ferry without rules.
scenario_rules() {
  local rules="$out/rules.conf" kept=$((port + 1)) ring=16384
  printf '%s\n' "# the first port stays on TCP" "tcp role=server local-port=$kept" \
    "rdma program=python3* ring=16k" > "$rules"
  pair "ferry FERRY_RULES=$rules" "ferry FERRY_RULES=$rules" 2 "$ip" 1000003
  expect server tcp_rule -eq 2
  expect server upgraded -eq 0
  expect client upgraded -eq 0
  STREAM_FERRY=$ferry pair "ferry FERRY_RULES=$rules" "ferry FERRY_RULES=$rules" 2 "$ip" 1000003
  expect server upgraded -eq 2
  expect client upgraded -eq 2
  expect_rdma 1000003 2
  # Each side of a connection registers its ring, a staging area as large as the
  # peer's, and 8 KiB of slots.
  expect server rdma_registered_most -le $((2 * (2 * ring + 8192)))
  expect client rdma_registered_most -le $((2 * (2 * ring + 8192)))
  printf '%s\n' "tcp program=/usr/bin/python3*" > "$rules"
  pair ferry "ferry FERRY_RULES=$rules" 2 "$ip" 1000003
  expect client tcp_rule -eq 2
  expect client upgraded -eq 0
  expect server upgraded -eq 0
}

# A BGSAVE-style child, forked again and again while both ends stream, never touches the
# connection: the parents' connections stay on RDMA, every byte intact.
scenario_fork_during() {
  export STREAM_FORK_EVERY=$((2 << 20))
  STREAM_FERRY=$ferry pair ferry ferry 2 "$ip" $((32 << 20))
  unset STREAM_FORK_EVERY
  expect client upgraded -eq 2
  expect server upgraded -eq 2
  expect_rdma $((32 << 20)) 2
}

# The bodies go through pipes and splice() both ways: carried over RDMA, every byte intact.
scenario_splice() {
  export STREAM_SPLICE=1
  STREAM_FERRY=$ferry pair ferry ferry 2 "$ip" $((16 << 20)) 1000003
  unset STREAM_SPLICE
  expect client upgraded -eq 2
  expect server upgraded -eq 2
  expect_rdma $((16 << 20)) 2
}

# cut_when SIDE BYTES COMMAND...: in the background, runs COMMAND once the SIDE
# process of the next pair has sent BYTES over RDMA (read from its live counters).
cut_when() {
  local side=$1 bytes=$2
  shift 2
  (
    for _ in $(seq 600); do
      pid=$(pgrep -f "^/usr/bin/python3 .*stream_check.py $side $ip $((port + 1)) " | head -1 || true)
      if [ -n "$pid" ]; then
        sent=$("$ferry" stat "$pid" 2>/dev/null | awk '$1 == "bytes_rdma_sent" {print $2}' || true)
        [ "${sent:-0}" -ge "$bytes" ] && break
      fi
      sleep 0.2
    done
    if "$@"; then say "[$scenario] cut after ${sent:-0} bytes over RDMA: $*"; else say "[$scenario] could not cut: $*"; fi
  ) &
  cutter=$!
}

# link_down_for_failover CONNECTIONS: takes veth0 down until both ends of the next pair
# have taken every connection off RDMA (at most 60 s), then brings it back. Left down,
# it can hold the kernel's rdma_cm destroy of a connection whose peer disconnected
# (its reply waits for the link): a program's exit then never finishes.
link_down_for_failover() {
  ip link set veth0 down || return 1
  local side pid n live end=$((SECONDS + 60))
  while [ $SECONDS -lt $end ]; do
    n=0 live=0
    for side in client server; do
      pid=$(pgrep -f "^/usr/bin/python3 .*stream_check.py $side $ip $((port + 1)) " | head -1 || true)
      [ -n "$pid" ] || continue
      live=$((live + 1))
      n=$((n + $("$ferry" stat "$pid" 2>/dev/null |
        awk '$1 == "downgrades_failover" || $1 == "downgrades_peer" {s += $2} END {print s + 0}' || true)))
    done
    # Done when every end left RDMA, or when both programs already ended.
    [ "$n" -ge $((2 * $1)) ] || [ "$live" -eq 0 ] && break
    sleep 0.2
  done
  ip link set veth0 up
  say "[$scenario] link back up: $n of $((2 * $1)) connection ends had left RDMA ($live programs running)"
}

# Failover: the RDMA path dies while 64 MiB go each way (the link rxe0 sits on goes
# down: rxe's port fails and its queue pairs with it, while TCP between two local
# addresses goes on through lo). Every connection goes back to TCP and finishes there,
# every byte intact (sha256), the program none the wiser; the counters show the
# downgrades and the bytes TCP carried after them. (On one host rxe loops its packets
# back inside the driver, so no packet filter can cut them; deleting the device waits
# for the programs to end, as rxe cannot let go of a device whose contexts a process
# holds. Across two hosts, cross-host.sh drops RoCE's packets on the wire instead.)
# It runs last: connections made right after the link comes back do not upgrade.
scenario_failover() {
  cut_when client $((8 << 20)) link_down_for_failover 2
  STREAM_FERRY=$ferry pair ferry ferry 2 "$ip" $((64 << 20))
  wait $cutter
  ip link set veth0 up
  for _ in $(seq 50); do rdma link show rxe0/1 2>/dev/null | grep -q 'state ACTIVE' && break; sleep 0.2; done
  expect client upgraded -eq 2
  expect server upgraded -eq 2
  local side
  for side in client server; do
    [ $(($(counter $side downgrades_failover) + $(counter $side downgrades_peer))) -eq 2 ] ||
      fail "$side: $(counter $side downgrades_failover) + $(counter $side downgrades_peer) downgrades, expected 2"
    say "[$scenario] $side: $(counter $side bytes_rdma_sent) bytes over RDMA, $(counter $side bytes_tcp_sent) on TCP" \
      "($(counter $side bytes_resent) resent), $(counter $side downgrades_failover) + $(counter $side downgrades_peer) downgrades"
    [ "$(counter $side bytes_tcp_sent)" -gt $((16 << 20)) ] || fail "$side: the rest did not go over TCP"
  done
}

scenario_server_plain() {
  pair plain ferry 4 "$ip" 1000003
  expect client upgraded -eq 0
  expect client tcp_peer_refused -eq 4
}

# A server under ferry with plain clients: each connection stays on TCP
# FERRY_UPGRADE_TIMEOUT_MS after the peer's first bytes, whoever sees them first: the
# poller's watch, or the program's read (epoll reports no bytes the program took
# before the poller looked, and the next ones may come much later). Each client
# pauses after its 8-byte length until the server's counters showed every connection
# given up, during the pause (server.mid; 60 s is a limit for a server that waits for
# more bytes to decide, not the thing measured).
scenario_client_plain() {
  rm -f "$out/$scenario.go"
  STREAM_SETTLE_UNTIL=$out/$scenario.go PAIR_DURING_CLIENT=look_mid_pause \
    pair "ferry FERRY_UPGRADE_TIMEOUT_MS=300 FERRY_LOG=debug" plain 8 "$ip" 1000003
  expect server upgraded -eq 0
  expect server tcp_peer_refused -eq 8
  expect server.mid tcp_peer_refused -eq 8
}

# look_mid_pause SERVER_PID PORT CONNECTIONS: once the connections are up, while the
# clients pause, the server's counters until every connection gave up (60 s at most);
# then the clients go on.
look_mid_pause() {
  for _ in $(seq 100); do
    [ "$(ss -Htn state established "( sport = :$2 )" | wc -l)" -ge "$3" ] && break
    sleep 0.1
  done
  for _ in $(seq 600); do
    "$ferry" stat "$1" > "$out/$scenario.server.mid.log" 2>&1 || break
    [ "$(awk '$1 == "tcp_peer_refused" {print $2}' "$out/$scenario.server.mid.log")" -ge "$3" ] && break
    sleep 0.1
  done
  grep -q tcp_peer_refused "$out/$scenario.server.mid.log" || fail "ferry stat: $(cat "$out/$scenario.server.mid.log")"
  touch "$out/$scenario.go"
}

scenario_device_excluded() {
  pair ferry "ferry FERRY_DEVICES=nosuchdev" 2 "$ip" 100000
  expect client upgraded -eq 0
  expect client tcp_device_excluded -eq 2
  grep -q "FERRY_DEVICES names nosuchdev, which does not exist" "$out/$scenario.client.log" ||
    fail "no message about the device that does not exist"
}

scenario_disabled() {
  pair "ferry FERRY_ENABLE=0" "ferry FERRY_ENABLE=0" 2 "$ip" 100000
  expect client upgrades_started -eq 0
}

# An address TCP reaches but rdma_cm cannot (on lo, not on the RDMA device's netdev):
# no route, counted, data intact.
scenario_no_route() {
  ip addr add 198.18.1.1/32 dev lo 2>/dev/null || true
  pair ferry ferry 2 198.18.1.1 100000
  expect client upgraded -eq 0
  expect client tcp_no_route -eq 2
}

# Loopback never leaves the kernel: neither end tries, starts its poller or maps rdma-core.
scenario_loopback() {
  pair "ferry FERRY_LOG=info" "ferry FERRY_LOG=info" 2 127.0.0.1 100000
  expect client upgrades_started -eq 0
  expect client bytes_tcp_received -ge 100000
  local side
  for side in server client; do
    ! grep -h "poller: started" "$out/$scenario.$side.log" || fail "$side: a poller started for loopback"
  done
}

# libibverbs finds its provider among those ferry loaded for the host's devices (rxe's
# alone), and loads none of the others.
scenario_providers() {
  pair "ferry FERRY_LOG=debug" "ferry FERRY_LOG=debug" 1 "$ip" 16000057
  expect client upgraded -eq 1
  local side
  for side in server client; do
    grep -q "loaded provider .*/librxe-rdmav[0-9]*\.so" "$out/$scenario.$side.log" || fail "$side: rxe's provider not loaded first"
    ! grep -h "loads every provider" "$out/$scenario.$side.log" || fail "$side: libibverbs loaded every provider"
  done
}

# A plain client's requests, each waiting for its reply, to an epoll server under ferry
# that waits all along for the upgrade request that never comes: during the handshake
# the poller's watch of the TCP side is one-shot, so the rounds do not wake the poller
# each (they did: about one wakeup per round, and a redis server under ferry served
# plain clients at a third of its rate until the wait ran out).
scenario_plain_client_rounds() {
  local rounds=400 server
  port=$((port + 1))
  rm -f "$out/$scenario".*.log "$out/$scenario.server.out"
  FERRY_STATS=1 FERRY_UPGRADE_TIMEOUT_MS=600000 FERRY_LOG_FILE="$out/$scenario.server.log" \
    "$ferry" /usr/bin/python3 "$here/../programs/rounds.py" server "$ip" $port > "$out/$scenario.server.out" 2>&1 &
  server=$!
  for _ in $(seq 100); do grep -q listening "$out/$scenario.server.out" 2>/dev/null && break; sleep 0.1; done
  timeout 300 /usr/bin/python3 "$here/../programs/rounds.py" client "$ip" $port $rounds > "$out/$scenario.client.out" 2>&1 ||
    fail "client: $(tail -2 "$out/$scenario.client.out")"
  if ! timeout 60 tail --pid=$server -f /dev/null; then
    kill $server 2>/dev/null
    fail "server did not finish"
  fi
  wait $server || fail "server: $(tail -3 "$out/$scenario.server.out")"
  expect server upgrades_started -eq 1
  expect server upgraded -eq 0
  expect server poller_wakeups -lt $((rounds / 4))
  say "[$scenario] $(tail -1 "$out/$scenario.client.out"); the server's poller woke $(counter server poller_wakeups) times"
}

# A server under ferry with the device serving plain clients a connection at a time
# (connect, a byte each way, close): no request ever comes. Its poller may wake for a
# connection's first bytes (they start the wait for a request), but not also for the
# program's accept, first read or close (3.5 wakeups a connection when each did).
scenario_plain_clients_churn() {
  local server conns wakeups
  port=$((port + 1))
  rm -f "$out/$scenario".*.log
  FERRY_STATS=1 FERRY_LOG_FILE="$out/$scenario.server.%p.log" \
    "$ferry" "$build/connect_rate" server "$ip" $port > "$out/$scenario.server.out" 2>&1 &
  server=$!
  wait_port $port
  timeout 60 "$build/connect_rate" client "$ip" $port 3 > "$out/$scenario.client.out" 2>&1 ||
    fail "client: $(tail -2 "$out/$scenario.client.out")"
  "$ferry" stat $server > "$out/$scenario.server.log" 2>&1 || fail "ferry stat: $(cat "$out/$scenario.server.log")"
  kill $server 2>/dev/null
  wait $server 2>/dev/null || true  # killed: it serves until then
  conns=$(counter server connections_passive)
  wakeups=$(counter server poller_wakeups)
  [ "$conns" -ge 40 ] || fail "only $conns connections"
  expect server upgrades_started -eq "$conns"
  expect server upgraded -eq 0
  expect server poller_wakeups -lt "$conns"
  say "[$scenario] $conns connections; the server's poller woke $wakeups times"
}

# A client under ferry that opens a connection per request to a plain server: the first
# requests are rejected (no rdma_cm listener on the port), and for a while after that
# its connections to that server stay on TCP without asking (core/conn/refusals.h).
# A client under ferry that opens several connections at once to a plain server (a
# client pool, wrk): one request asks, the others wait for its answer instead of each
# building a queue pair and registering rings for nothing.
scenario_plain_server_asked_once() {
  local server asked
  port=$((port + 1))
  rm -f "$out/$scenario".*.log
  "$build/connect_rate" server "$ip" $port > "$out/$scenario.server.out" 2>&1 &
  server=$!
  wait_port $port
  # Ten connections, then a byte on each (every first data call at once), then the
  # echoes (connect_rate serves them one by one), open until every upgrade is decided.
  FERRY_STATS=1 FERRY_LOG=debug FERRY_LOG_FILE="$out/$scenario.client.log" timeout 120 \
    "$ferry" /usr/bin/python3 -c '
import socket, sys, time
conns = [socket.create_connection((sys.argv[1], int(sys.argv[2]))) for _ in range(10)]
for c in conns: c.sendall(b"x")
print("echoed", sum(len(c.recv(1)) for c in conns))
time.sleep(3)  # until every answer is in' "$ip" $port > "$out/$scenario.client.out" 2>&1 ||
    fail "client: $(tail -2 "$out/$scenario.client.out")"
  kill $server 2>/dev/null
  wait $server 2>/dev/null || true
  grep -q "echoed 10" "$out/$scenario.client.out" || fail "client: $(tail -2 "$out/$scenario.client.out")"
  asked=$(grep -c "REJECTED: no rdma_cm listener on the port" "$out/$scenario.client.log")
  expect client upgrades_started -eq 10
  expect client upgraded -eq 0
  expect client tcp_peer_refused -eq 10
  [ "$asked" -eq 1 ] || fail "$asked of 10 connections asked the plain server, expected 1"
  say "[$scenario] $asked of 10 connections asked"
}

scenario_plain_server_remembered() {
  local server conns started later asks answers
  port=$((port + 1))
  rm -f "$out/$scenario".*.log
  "$build/connect_rate" server "$ip" $port > "$out/$scenario.server.out" 2>&1 &
  server=$!
  wait_port $port
  FERRY_STATS=1 FERRY_LOG=debug FERRY_LOG_FILE="$out/$scenario.client.log" timeout 60 \
    "$ferry" "$build/connect_rate" client "$ip" $port 2 > "$out/$scenario.client.out" 2>&1 ||
    fail "client: $(tail -2 "$out/$scenario.client.out")"
  # Another process of the user, within the memory: it asks nothing, and never starts
  # its poller (nor loads rdma-core) for that server.
  FERRY_STATS=1 FERRY_LOG=debug FERRY_LOG_FILE="$out/$scenario.later.log" timeout 60 \
    "$ferry" "$build/connect_rate" client "$ip" $port 1 > "$out/$scenario.later.out" 2>&1 ||
    fail "later client: $(tail -2 "$out/$scenario.later.out")"
  kill $server 2>/dev/null
  wait $server 2>/dev/null || true  # killed: it serves until then
  conns=$(counter client connections_active)
  started=$(counter client upgrades_started)
  later=$(counter later connections_active)
  [ "$conns" -ge 40 ] || fail "only $conns connections"
  expect client upgraded -eq 0
  expect client upgrades_started -lt $((conns / 4))
  # Each request asked was answered, a request of a connection closed before its answer
  # too: that answer is what the memory learns from.
  asks=$(grep -c "asks to upgrade" "$out/$scenario.client.log")
  answers=$(grep -c "REJECTED: no rdma_cm listener on the port" "$out/$scenario.client.log")
  [ "$asks" -ge 1 ] && [ "$asks" -eq "$answers" ] || fail "$asks requests asked, $answers answered for want of a listener"
  [ "$later" -ge 20 ] || fail "only $later connections in the later process"
  expect later upgrades_started -eq 0
  expect later tcp_peer_refused -eq "$later"
  expect later poller_wakeups -eq 0
  if grep -q "poller: started" "$out/$scenario.later.log"; then fail "the later process started its poller"; fi
  say "[$scenario] $conns connections, $started started an upgrade, $asks asked and answered;" \
    "a later process: $later connections, none asked"
}

# The server accepts its connections late, after their clients sent data and asked for
# the upgrade: the requests wait for the accept, and the connections upgrade.
scenario_late_accept() {
  # Large streams: until the accept, the clients fill the kernel's buffers on TCP (on
  # purpose: no STREAM_FERRY wait); then the sends in flight at the upgrade go on TCP
  # too. How much of them crosses RDMA depends on the machine's speed: the verdict is
  # the count of upgraded connections, and every byte accounted for.
  STREAM_ACCEPT_DELAY=3 pair ferry ferry 4 "$ip" 16000057
  expect client upgraded -eq 4
  expect server upgraded -eq 4
  expect_rdma 64000228 4 1
}

# The server accepts late (the client's request is held for it) and then only sends:
# no byte from the client, no sleeping reader. The accept alone must take up the held
# request.
scenario_late_accept_push() {
  local server
  port=$((port + 1))
  rm -f "$out/$scenario".*.log "$out/$scenario.server.out"
  FERRY_STATS=1 FERRY_LOG_FILE="$out/$scenario.server.log" timeout 120 "$ferry" /usr/bin/python3 -c '
import socket, sys, time
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((sys.argv[1], int(sys.argv[2])))
l.listen(8)
print("listening", flush=True)
time.sleep(1)
c, _ = l.accept()
for _ in range(300):  # 30 MB, paced: the upgrade has time to finish mid-stream
    c.sendall(b"p" * 100000)
    time.sleep(0.01)
c.close()' "$ip" $port > "$out/$scenario.server.out" 2>&1 &
  server=$!
  for _ in $(seq 100); do grep -q listening "$out/$scenario.server.out" 2>/dev/null && break; sleep 0.1; done
  FERRY_STATS=1 FERRY_LOG_FILE="$out/$scenario.client.log" timeout 120 "$ferry" /usr/bin/python3 -c '
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
n = 0
while True:
    b = s.recv(1 << 20)
    if not b: break
    n += len(b)
print("received", n)' "$ip" $port > "$out/$scenario.client.out" 2>&1 || fail "client: $(tail -2 "$out/$scenario.client.out")"
  wait $server || fail "server: $(tail -2 "$out/$scenario.server.out")"
  grep -q "received 30000000" "$out/$scenario.client.out" || fail "client: $(tail -1 "$out/$scenario.client.out")"
  expect server upgraded -eq 1
  expect client upgraded -eq 1
  say "[$scenario] $(cat "$out/$scenario.client.out"); $(counter client bytes_rdma_received) of them over RDMA"
}

# accept_once_refused SERVER PORT CONNECTIONS: lets the server accept (its
# STREAM_ACCEPT_AFTER file) once the client counts all its requests refused.
accept_once_refused() {
  local pid refused
  for _ in $(seq 1200); do
    pid=$(pgrep -f "^/usr/bin/python3 .*stream_check.py client $ip $2 " | head -1 || true)
    refused=$([ -z "$pid" ] || "$ferry" stat "$pid" 2>/dev/null | awk '$1 == "tcp_peer_refused" {print $2}' || true)
    [ "${refused:-0}" -ge "$3" ] && break
    sleep 0.1
  done
  touch "$out/$scenario.accept"
}

# The server does not accept within FERRY_ACCEPT_WAIT_MS: the requests are refused and
# counted, the connections stay on TCP, and the data is intact when it finally accepts
# (once the client counted the refusals, however long they took to come).
scenario_accept_too_late() {
  rm -f "$out/$scenario.accept"
  STREAM_ACCEPT_AFTER=$out/$scenario.accept PAIR_DURING_CLIENT=accept_once_refused \
    pair "ferry FERRY_ACCEPT_WAIT_MS=500" ferry 4 "$ip" 1000003
  expect client upgraded -eq 0
  expect server upgraded -eq 0
  expect server requests_unmatched -eq 4
  expect client tcp_peer_refused -eq 4
}

# A server-speaks-first protocol: the greeting goes on TCP before the client has sent
# anything (so before the upgrade is asked for), and arrives in order.
scenario_server_first() {
  STREAM_FERRY=$ferry STREAM_SERVER_FIRST=1 pair ferry ferry 4 "$ip" 1000003
  expect client upgraded -eq 4
  expect server upgraded -eq 4
  expect_rdma 4000012 4
}

# IPv6 sockets with v4-mapped addresses at both ends (the test bed's fabric is IPv4):
# they upgrade like IPv4.
scenario_v4_mapped() {
  STREAM_FERRY=$ferry pair ferry ferry 2 "::ffff:$ip" 1000003
  expect client upgraded -eq 2
  expect server upgraded -eq 2
  expect_rdma 1000003 2
}

# Connect requests with malformed or forged private data (forge_request: no data,
# truncated, wrong magic or version, ring sizes and address out of range, another port,
# a connection that does not exist) are each refused and counted; then a real client
# upgrades on the same listener with its data intact.
forge() {
  "$build/forge_request" "$@" > "$out/$scenario.forge.out" 2>&1
  sed "s/^/[$scenario] forged request, /" "$out/$scenario.forge.out"
  local n
  n=$(grep -c 'REJECTED$' "$out/$scenario.forge.out" || true)
  [ "$n" -eq 10 ] || fail "$n of 10 forged requests refused"
}
scenario_forged() {
  STREAM_FERRY=$ferry PAIR_BEFORE_CLIENT=forge pair "ferry FERRY_ACCEPT_WAIT_MS=1000" ferry 1 "$ip" 1000003
  expect server requests_malformed -eq 9
  expect server requests_unmatched -eq 1
  expect client upgraded -eq 1
  expect server upgraded -eq 1
  expect_rdma 1000003 1
}

# Registered memory runs out (an unprivileged user under a locked-memory limit of
# 600 KiB: room for one connection's rings): the connections beyond it stay on TCP,
# counted as tcp_resources on the side that could not register.
scenario_memlock() {
  local logs=/tmp/ferry-memlock
  mkdir -p $logs && chmod 1777 $logs
  # Every connection lives until both its ends decided its upgrade (each side pauses
  # after its length until its counters show all 4 upgraded or kept on TCP), however
  # late a loaded machine makes that.
  STREAM_FERRY=$ferry STREAM_DECIDED=1 PAIR_LOGS=$logs PAIR_WRAP="$here/as-nobody 600" pair "ferry FERRY_LOG=debug" ferry 4 "$ip" 1000003
  local up res
  up=$(counter client upgraded)
  res=$(( $(counter client tcp_resources) + $(counter server tcp_resources) ))
  [ "$up" -le 1 ] || fail "client upgraded $up connections under a 600 KiB limit"
  if [ "$res" -lt $((4 - up)) ]; then
    fail "only $res connections counted as tcp_resources ($up upgraded)"
    grep -hv '^ ' "$out/$scenario".*.log | tail -20 | sed "s/^/[$scenario] log: /"
  fi
  say "[$scenario] $up upgraded, $res kept on TCP for want of registered memory"
}

# Short connections ending every way request/response programs end them (shutdown or
# close from either side, or both at once), with their upgrades often still in flight:
# each carries exactly kernel TCP's bytes, and nothing waits for an end that never
# comes. Two seeds, 60 connections each, both ends in one process under ferry; then 40
# servers that send more than the kernel buffers hold and close.
scenario_endings() {
  local seed
  for seed in 4 5; do
    port=$((port + 100))
    FERRY_STATS=1 FERRY_BACKTRACE=1 FERRY_LOG_FILE="$out/$scenario.$seed.log" timeout 300 "$ferry" \
      /usr/bin/python3 "$here/../programs/endings.py" "$ip" "$port" 60 "$seed" > "$out/$scenario.$seed.out" 2>&1 ||
      fail "seed $seed (status $?): $(tail -3 "$out/$scenario.$seed.out")"
    say "[$scenario] seed $seed: $(head -1 "$out/$scenario.$seed.out"), $(counter "$seed" upgraded) connection ends upgraded"
    [ "$(counter "$seed" upgraded)" -gt 0 ] || fail "seed $seed: no connection reached RDMA"
  done
  # A server that closes while its client's upgrade is being answered (pattern f): no
  # share to judge (when the close comes decides whether any upgrades), only the bytes.
  port=$((port + 100))
  FERRY_STATS=1 FERRY_BACKTRACE=1 FERRY_LOG_FILE="$out/$scenario.close.log" timeout 600 "$ferry" \
    /usr/bin/python3 "$here/../programs/endings.py" "$ip" "$port" 40 6 f > "$out/$scenario.close.out" 2>&1 ||
    fail "closing server (status $?): $(sed -n 2p "$out/$scenario.close.out")"
  say "[$scenario] closing server: $(head -1 "$out/$scenario.close.out")"
}

# 1,000 connections upgraded at the same time in one process (16 KiB rings): each side
# sends its bodies only once its counters show all 1,000 upgraded (STREAM_FERRY), so no
# connection has ended at that reading, and the server's rdma_registered_bytes there
# (live connections' rings) must hold the rings of all 1,000 together.
scenario_thousand() {
  ulimit -n 8192
  local s="ferry FERRY_RING_SIZE=16k FERRY_UPGRADE_TIMEOUT_MS=60000" need=$((1000 * 2 * 16384)) held
  STREAM_FERRY=$ferry pair "$s" "$s" 1000 "$ip" 1000 4093
  held=$(sed -n 's/^upgraded [0-9]*, registered \([0-9]*\) bytes$/\1/p' "$out/$scenario.server.out")
  expect client upgraded -eq 1000
  expect server upgraded -eq 1000
  [ "${held:-0}" -ge "$need" ] ||
    fail "server's registered memory once all 1000 upgraded: ${held:-no reading} bytes, under 1000 connections' rings"
  say "[$scenario] server: ${held:-no} bytes registered at once (1000 connections' rings: $need)"
}

# A forked server listens on a fresh port and tells its client at once (qperf's data
# connections): the client's upgrade request must find the rdma_cm listener, so listen()
# returns only once that listener is in place.
scenario_listen_then_connect() {
  local rounds=60
  rm -f "$out/$scenario".*.log "$out/$scenario".go.*
  LTC_GO=$out/$scenario.go FERRY_STATS=1 FERRY_BACKTRACE=1 FERRY_LOG_FILE="$out/$scenario.%p.log" \
    "$ferry" "$build/listen_then_connect" "$ip" $rounds > "$out/$scenario.out" 2>&1 &
  local prog=$! i n
  # Each round's round trips go on until the program's counters show its two ends of
  # the round (the control connection it accepted, the one it made) upgraded.
  for ((i = 0; i < rounds; i++)); do
    for _ in $(seq 1200); do
      # (|| true: a process whose counters cannot be read yet is no error of the script's)
      n=$("$ferry" stat $prog 2>/dev/null | awk '$1 == "upgraded" {print $2}' || true)
      [ "${n:-0}" -ge $((2 * (i + 1))) ] && break
      kill -0 $prog 2>/dev/null || break
      sleep 0.1
    done
    touch "$out/$scenario.go.$i"
  done
  timeout 120 tail --pid=$prog -f /dev/null || { kill $prog 2>/dev/null; fail "the program did not finish"; }
  wait $prog || fail "$(tail -3 "$out/$scenario.out")"
  local up refused
  up=$(awk '$1 == "upgraded" {s += $2} END {print s + 0}' "$out/$scenario".*.log)
  refused=$(awk '$1 == "tcp_peer_refused" {s += $2} END {print s + 0}' "$out/$scenario".*.log)
  [ "$up" -eq $((4 * rounds)) ] && [ "$refused" -eq 0 ] || fail "$up of $((4 * rounds)) ends upgraded (peer_refused $refused)"
  say "[$scenario] $up of $((4 * rounds)) ends upgraded (each round: a control and a data connection)"
}

# A server that sends 8 MiB and leaves at once (os._exit, sys.exit, close then
# os._exit, SO_LINGER {1, 5} then close and os._exit, an exec with the socket
# close-on-exec, SIGTERM or SIGINT at their default action; the linger one with a
# client that starts reading a second later): kernel TCP delivers every byte after the
# process is gone, and so must ferry, whose send queue and unfinished writes live in
# the process. And a C++ server that leaves (_exit, SIGTERM) while another thread
# streams for ever to a client slower than it (stream_exit): the process still ends,
# and the client reads an intact stream to an orderly end. Each way runs on kernel TCP and under ferry at both ends; the client's
# verdicts must be the same, the counters must show the bytes went over RDMA (all of
# them: exit_flush's server sends once its connection upgraded, FLUSH_GO; stream_exit's
# are only reported).
scenario_exit_flush() {
  local how delay check size=$((8 << 20)) mode line base=$scenario
  for how in _exit exit close_exit linger exec sigterm sigint sigpipe thread_exit thread_sigterm; do
    delay=0 check=
    [ "$how" = linger ] && delay=1
    [[ "$how" = thread_* ]] && check=prefix
    for mode in plain ferry; do
      scenario=$base.$how.$mode
      port=$((port + 1))
      local -a spre=() cpre=()
      if [ $mode = ferry ]; then
        spre=(env FERRY_STATS=1 FERRY_BACKTRACE=1 "FERRY_LOG_FILE=$out/$scenario.server.log" "FLUSH_GO=$out/$scenario.go" "$ferry")
        cpre=(env FERRY_STATS=1 FERRY_BACKTRACE=1 "FERRY_LOG_FILE=$out/$scenario.client.log" "$ferry")
      fi
      rm -f "$out/$scenario".*.log "$out/$scenario.go"
      rm -f "$out/$scenario.server.out"  # the wait below must not find the last one's
      case $how in
        thread_*) "${spre[@]}" "$build/stream_exit" "$ip" $port ${how#thread_} > "$out/$scenario.server.out" 2>&1 & ;;
        *) "${spre[@]}" /usr/bin/python3 "$here/../programs/exit_flush.py" server "$ip" $port $how $size \
             > "$out/$scenario.server.out" 2>&1 & ;;
      esac
      local server=$! goer=""
      for _ in $(seq 100); do grep -q listening "$out/$scenario.server.out" 2>/dev/null && break; sleep 0.1; done
      if [ $mode = ferry ] && [[ "$how" != thread_* ]]; then
        # exit_flush's server sends once its counters show the connection upgraded (120 s
        # at most, a hang limit; the counters then say it did not).
        (
          for _ in $(seq 1200); do
            [ "$("$ferry" stat $server 2>/dev/null | awk '$1 == "upgraded" {print $2}')" = 1 ] && break
            sleep 0.1
          done
          touch "$out/$scenario.go"
        ) &
        goer=$!
      fi
      timeout 120 "${cpre[@]}" /usr/bin/python3 "$here/../programs/exit_flush.py" client "$ip" $port $size $delay $check \
        > "$out/$scenario.client.out" 2>&1 || fail "client: $(tail -2 "$out/$scenario.client.out")"
      timeout 60 tail --pid=$server -f /dev/null || { kill $server 2>/dev/null; fail "server did not finish"; }
      [ -z "$goer" ] || wait $goer
      local status=0 want=
      wait $server || status=$?  # os._exit(0) or the signal; a hung one failed above
      case $how in sigterm|thread_sigterm) want=143 ;; sigint) want=130 ;; sigpipe) want=141 ;; esac
      [ -z "$want" ] || [ $status -eq $want ] || fail "server ended with status $status, not $want (its signal)"
      line=$(tail -1 "$out/$scenario.client.out")
      say "[$scenario] $line"
      if [ $mode = ferry ] && [[ "$how" = thread_* ]]; then
        # stream_exit starts sending at once and exits 0.5 s later: whether its connection
        # upgraded by then, and how much crossed RDMA, depends on the machine's speed, so
        # it is reported, not judged (its stream must be intact and end in order above).
        say "[$scenario] client: upgraded $(counter client upgraded), $(counter client bytes_rdma_received)" \
          "bytes received over RDMA, $(counter client bytes_tcp_received) on TCP"
      elif [ $mode = ferry ]; then
        expect client upgraded -eq 1
        expect client bytes_rdma_received -ge "$size"
        case $how in *sig*) ;; *) expect server upgraded -eq 1 ;; esac  # a signal prints no counters
      fi
    done
  done
  scenario=$base
}

all=(integrity_one integrity_many peek_race proof_select ring_sizes fork_during splice server_plain client_plain device_excluded disabled no_route loopback
  providers rules plain_client_rounds plain_clients_churn plain_server_asked_once plain_server_remembered late_accept late_accept_push accept_too_late server_first listen_then_connect v4_mapped forged memlock thousand endings exit_flush failover)
for scenario in "${@:-${all[@]}}"; do
  "scenario_$scenario"
done
verdict rdma-stream
