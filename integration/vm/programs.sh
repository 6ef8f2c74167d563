#!/usr/bin/env bash
# Inside the test bed: unmodified programs, both ends under ferry, over rxe0's
# address. Each must succeed exactly as it does without ferry; the table shows where
# its bytes went (ferry's counters) and why a connection stayed on TCP.
#   programs.sh BUILD_DIR
set -uo pipefail
build=$1
ip=${TESTBED_IP:?run inside integration/testbed}
out=${VM_OUT:-/tmp}
ferry=$build/ferry
export PATH=$PATH:/usr/sbin:/sbin
source "$(dirname "$0")/common.sh"
declare -a rows
# Rows count upgrades, so the upgrade window (FERRY_UPGRADE_TIMEOUT_MS, 2 s by default,
# after which a connection stays on TCP) is a limit for hangs here, not a race with a
# loaded machine: 16 connections of wrk handshaking at once through a redirecting
# master can take longer than 2 s under emulation.
export FERRY_UPGRADE_TIMEOUT_MS=30000

fail() { failed_with "FAIL [$name]: $*"; }

under() {  # under SIDE CMD...: runs CMD under ferry with its counters in $out/$name.SIDE.*.log
  local side=$1
  shift
  FERRY_STATS=1 FERRY_BACKTRACE=1 FERRY_LOG_FILE="$out/$name.$side.%p.log" "$ferry" "$@"
}

serve() {  # serve CMD...: the server under ferry, in the background; its pid in $server
  FERRY_STATS=1 FERRY_BACKTRACE=1 FERRY_LOG_FILE="$out/$name.server.%p.log" "$ferry" "$@" > "$out/$name.server.out" 2>&1 &
  server=$!
}

stop() {  # stop PID: counters via ferry stat, then SIGTERM
  "$ferry" stat "$1" >> "$out/$name.server.$1.log" 2>/dev/null
  kill "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

sum() {  # sum FIELD [SIDE]: over every process of this program (or of its SIDE); each
         # process's largest reading
  awk -v f="$1" '$1 == f && $2 > m[FILENAME] {m[FILENAME] = $2} END {for (k in m) s += m[k]; printf "%.0f", s}' \
    "$out/$name".${2:-*}.*log 2>/dev/null
}

expect_rdma() {  # expect_rdma MIN_BYTES: this program's bytes went over RDMA, at both ends
  local up; up=$(sum upgraded)
  [ "$up" -ge 2 ] || fail "expected on RDMA at both ends, upgraded=$up"
  [ "$(sum bytes_rdma_sent)" -ge "$1" ] || fail "only $(sum bytes_rdma_sent) bytes over RDMA"
}

expect_share() {  # expect_share PCT [SIDE]: at least PCT% of the bytes sent and received
                 # (by SIDE's processes) went over RDMA. Only for a run whose bulk waits
                 # for every upgrade (fork_echo's ECHO_FERRY): its TCP bytes are then the
                 # first round trips, whatever the machine's speed.
  local r t
  r=$(( $(sum bytes_rdma_sent "${2:-}") + $(sum bytes_rdma_received "${2:-}") ))
  t=$(( $(sum bytes_tcp_sent "${2:-}") + $(sum bytes_tcp_received "${2:-}") ))
  [ $((r * 100)) -ge $(( (r + t) * $1 )) ] || fail "only $r of $((r + t)) bytes went over RDMA (want $1%)"
}

record() {  # record RESULT: one row of the table, and no warnings in ferry's logs
  local reasons="" r
  for r in tcp_no_rdma tcp_no_route tcp_device_excluded tcp_rule tcp_io_uring tcp_peer_refused tcp_timeout tcp_resources \
    tcp_other_listener; do
    [ "$(sum $r)" -gt 0 ] && reasons+="${r#tcp_}=$(sum $r) "
  done
  grep -hE ' (warn|error) |fatal' "$out/$name".*.log && fail "ferry logged warnings"
  rows+=("$(printf '%-16s %-6s %9s %14s %14s  %s' "$name" "$1" "$(sum upgraded)" "$(sum bytes_rdma_sent)" \
    "$(sum bytes_tcp_sent)" "${reasons:--}")")
}

# NPtcp's receiver listens on port 5002; it ends after one client, or is stopped if the
# client failed.
name=NPtcp
(cd /tmp && under server NPtcp > "$out/$name.server.out" 2>&1) &
server=$!
wait_port 5002
(cd /tmp && timeout 300 "$ferry" true) # warm the page cache of the library
if (cd /tmp && FERRY_STATS=1 FERRY_LOG_FILE="$out/$name.client.%p.log" timeout 300 "$ferry" NPtcp -h "$ip" -u 262144 \
      -o "$out/np.out" > "$out/$name.client.out" 2>&1); then res=ok; else res=FAILED; fail "$(tail -3 "$out/$name.client.out")"; fi
timeout 60 tail --pid=$server -f /dev/null || pkill -x NPtcp
wait $server
expect_rdma 1000000
record $res

# iperf3 -P 4 until its window: once the client counts its streams upgraded, 3 s of
# them are measured (window_rdma); then SIGINT, on which iperf3 reports and both ends
# end. Then two runs of 2 s whose every result is checked, whatever carried them.
name=iperf3
serve iperf3 -s -1 -B "$ip" -p 5201
wait_port 5201
under client iperf3 -c "$ip" -p 5201 -t 600 -P 4 > "$out/$name.window.out" 2>&1 &
window_rdma iperf3 4
pkill -INT -n -x iperf3
timeout 60 tail --pid=$server -f /dev/null || { kill -9 $server; fail "iperf3 server of the window did not end"; }
wait
res=ok
for args in "-P 4" "-R"; do
  serve iperf3 -s -1 -B "$ip" -p 5201
  wait_port 5201
  if bounded 120 iperf3 under client iperf3 -c "$ip" -p 5201 -t 2 $args > "$out/$name.client.out" 2>&1; then :; else
    res=FAILED; fail "iperf3 $args (status $?, stacks of a hang in hang.iperf3.txt): $(tail -3 "$out/$name.client.out")"; fi
  timeout 60 tail --pid=$server -f /dev/null || kill -9 $server
  wait $server || fail "iperf3 server"
done
record $res

name=redis
serve redis-server --port 6380 --bind "$ip" --protected-mode no --save '' --appendonly no
wait_port 6380
bounded 300 redis under client redis-benchmark -h "$ip" -p 6380 -c 50 -P 16 -n 5000 -q > "$out/$name.client.out" 2>&1 ||
  fail "redis-benchmark (status $?, stacks of a hang in hang.redis.txt)"
n=$(tr '\r' '\n' < "$out/$name.client.out" | grep -c 'requests per second')
if [ "$n" -ge 15 ] && ! grep -qiE 'error|refused' "$out/$name.client.out"; then res=ok; else
  res=FAILED; fail "redis-benchmark: $n results; $(tail -3 "$out/$name.client.out")"; fi
stop $server
expect_rdma 1000000
record $res

# Four clients at once, multiplexed by the server's epoll, for as long as the window
# takes: once the server counts the four upgraded, 3 s of them are measured
# (window_rdma), and they are stopped. Then a ping-pong and a throughput run of 2 s
# whose summaries are read, whatever carried them.
name=sockperf
echo "T:$ip:11111" > "$out/sockperf.feed"  # a feed file lets the server multiplex with epoll
serve sockperf server -f "$out/sockperf.feed" -F epoll
wait_port 11111
res=ok
for i in 1 2 3 4; do  # --mps: sockperf keeps every sample of -t's run
  under client sockperf ping-pong --tcp -i "$ip" -p 11111 -t 600 --mps 2000 -m 256 > "$out/$name.many$i.out" 2>&1 &
done
window_rdma $server 4
pkill -f "^sockperf ping-pong --tcp -i $ip -p 11111 -t 600 "
wait $(jobs -p | grep -vx "$server") 2>/dev/null
under client sockperf ping-pong --tcp -i "$ip" -p 11111 -t 2 -m 64 > "$out/$name.pp.out" 2>&1 &&
  grep -q 'Summary: Latency' "$out/$name.pp.out" || { res=FAILED; fail "ping-pong: $(tail -2 "$out/$name.pp.out")"; }
under client sockperf throughput --tcp -i "$ip" -p 11111 -t 2 -m 65000 > "$out/$name.tp.out" 2>&1 &&
  grep -q 'Summary: BandWidth' "$out/$name.tp.out" || { res=FAILED; fail "throughput: $(tail -2 "$out/$name.tp.out")"; }
stop $server
record $res

# memcaslap keeps 32 connections busy: once they upgraded, 3 s of them are measured
# (window_rdma), and it is stopped (SIGINT: it says so, and prints no results). Then a
# short run whose results are read: every value it verified came back intact.
name=memcached
serve memcached -u root -l "$ip" -p 11211 -t 4 -c 1024
server_pid=$server
wait_port 11211
under load memcaslap -s "$ip:11211" -T 2 -c 32 -t 600s > "$out/$name.load.out" 2>&1 &
load=$!
window_rdma memcaslap 32
pkill -INT -n -x memcaslap 2>/dev/null || fail "memcaslap ended before it was stopped"
wait $load
if under client memcaslap -s "$ip:11211" -T 2 -c 32 -t 3s -v 0.1 > "$out/$name.client.out" 2>&1 &&
   grep -q 'Run time' "$out/$name.client.out" && grep -q '^verify_failed: 0$' "$out/$name.client.out" &&
   grep -q '^verify_misses: 0$' "$out/$name.client.out"; then res=ok; else
  res=FAILED; fail "memcaslap: $(tail -3 "$out/$name.client.out")"; fi
stop $server_pid
expect_rdma 100000
record $res

name=asyncio
asyncio_echo="$(cd "$(dirname "$0")/.." && pwd)/programs/asyncio_echo.py"
serve /usr/bin/python3 "$asyncio_echo" server "$ip" 7788
wait_port 7788
if under client /usr/bin/python3 "$asyncio_echo" client "$ip" 7788 16 40 > "$out/$name.client.out" 2>&1; then res=ok; else
  res=FAILED; fail "$(tail -3 "$out/$name.client.out")"; fi
stop $server
expect_rdma 1000000
record $res

name=qperf
serve qperf
wait_port 19765
if under client qperf "$ip" -t 2 tcp_lat tcp_bw > "$out/$name.client.out" 2>&1 &&
   grep -q 'latency' "$out/$name.client.out" && grep -q 'bw' "$out/$name.client.out"; then res=ok; else
  res=FAILED; fail "$(tail -3 "$out/$name.client.out")"; fi
stop $server
expect_rdma 10000000  # each test's data connection is served by a forked child
record $res

# Multi-process servers: every connection is served by a process other than the one
# that listened (whose rdma_cm listener redirects the request to the server's own).
fork_echo="$(cd "$(dirname "$0")/.." && pwd)/programs/fork_echo.py"
port=7777
# The client sends each connection's bulk once the counters show it upgraded
# (ECHO_FERRY), in waves no larger than the server serves at once (prefork: its 4
# workers): nearly every byte goes over RDMA, on any machine.
for kind in "ForkingTCPServer 8 server" "fork-after-accept 8 forkaccept" "prefork 4 prefork 4" "passfd 8 passfd 4"; do
  set -- $kind
  name=$1 wave=$2
  port=$((port + 1))
  shift 2
  serve /usr/bin/python3 "$fork_echo" "$1" "$ip" "$port" "${@:2}"
  wait_port $port
  if ECHO_FERRY=$ferry under client /usr/bin/python3 "$fork_echo" client "$ip" "$port" 8 4000000 $wave > "$out/$name.client.out" 2>&1; then res=ok; else
    res=FAILED; fail "$(tail -3 "$out/$name.client.out")"; fi
  sleep 0.5  # the servers' children exit (and print their counters) after the client's close
  stop $server
  sleep 0.5
  expect_rdma 1000000
  expect_share 99
  [ "$(sum requests_redirected)" -ge 8 ] || fail "expected 8 redirected requests, $(sum requests_redirected)"
  record $res
done

# Three unrelated processes (not one another's children), each with its own
# SO_REUSEPORT listener on one port: the kernel spreads the connections over them, the
# first to listen holds the rdma_cm port and redirects the others' requests to them
# (their user's claims table). Each process must have served connections over RDMA.
name=reuseport-apart
port=7790
apart=()
for i in 1 2 3; do
  serve /usr/bin/python3 "$fork_echo" reuseport "$ip" $port
  apart+=("$server")
  for _ in $(seq 100); do [ "$(ss -Hltn "sport = :$port" | wc -l)" -ge $i ] && break; sleep 0.1; done
done
# (Each upgrade is redirected once the serving process claims it at its first data
# call; the client's bulk waits until the counters show all 24 upgraded.)
if ECHO_FERRY=$ferry under client /usr/bin/python3 "$fork_echo" client "$ip" $port 24 1000000 > "$out/$name.client.out" 2>&1; then res=ok; else
  res=FAILED; fail "$(tail -3 "$out/$name.client.out")"; fi
sleep 0.5
for p in "${apart[@]}"; do
  stop "$p"
  up=$(awk '$1 == "upgraded" && $2 > m {m = $2} END {print m + 0}' "$out/$name.server.$p.log" 2>/dev/null)
  [ "${up:-0}" -ge 1 ] || { res=FAILED; fail "server process $p: no connection upgraded"; }
done
expect_rdma 1000000
expect_share 99
[ "$(sum requests_redirected)" -ge 2 ] || fail "expected redirected requests, $(sum requests_redirected)"
record $res

# wrk_rdma PORT: wrk keeps 16 connections to nginx on PORT busy: once they upgraded
# (each redirected to the worker that accepted it), 3 s of them are measured
# (window_rdma); then wrk is stopped (SIGINT: it prints its results), and the master
# and its workers. (wrk's -d is a limit for hangs, and so is its --timeout: a response
# later than wrk's default 2 s counts as a socket error, which a loaded host gives.)
wrk_rdma() {
  under wrk wrk -t 2 -c 16 -d 600s --timeout 30s "http://$ip:$1/small" > "$out/$name.wrk.out" 2>&1 &
  local wrk=$!
  window_rdma wrk 16
  pkill -INT -n -x wrk 2>/dev/null || fail "wrk ended before it was stopped"
  wait $wrk && grep -q 'Requests/sec' "$out/$name.wrk.out" && ! grep -qE 'Non-2xx|Socket errors' "$out/$name.wrk.out" ||
    { res=FAILED; fail "wrk: $(tail -3 "$out/$name.wrk.out")"; }
  for w in $(pgrep -P "$server"); do "$ferry" stat "$w" >> "$out/$name.server.$w.log" 2>/dev/null; done
  stop $server
  [ "$(sum upgraded server)" -ge 16 ] || fail "expected the workers' 16 connections upgraded, $(sum upgraded server)"
  [ "$(sum requests_redirected)" -ge 16 ] || fail "expected the workers' connections redirected, $(sum requests_redirected)"
}

# nginx: a master and 4 workers (which drop root for nobody), sendfile on; curl fetches
# an 8 MiB file (sha256-checked; one request per connection, so its bytes may all go
# before the upgrade finishes), then wrk keeps 16 connections busy: once they upgraded,
# nearly all of their bytes go over RDMA.
name=nginx
www=$(mktemp -d /tmp/nginx-www.XXXXXX)  # the workers (nobody) cannot enter $out
chmod 755 "$www"
head -c 8388608 /dev/urandom > "$www/big"
head -c 4096 /dev/urandom > "$www/small"
chmod 644 "$www"/*
"$(dirname "$0")/nginx-conf" "$ip" 8088 "$www" > "$out/nginx.conf"
# Each upgraded connection registers about 520 KiB, counted against the workers'
# locked-memory limit once they are nobody: 8 MiB would leave the 16th on TCP.
memlock=$(ulimit -l)
ulimit -l 65536
serve nginx -c "$out/nginx.conf" -e stderr
ulimit -l "$memlock"
wait_port 8088
res=ok
want=$(sha256sum < "$www/big")
for i in 1 2 3; do
  got=$(under client curl -sf "http://$ip:8088/big" | sha256sum)
  [ "$got" = "$want" ] || { res=FAILED; fail "curl $i: the 8 MiB file came back different"; }
done
wrk_rdma 8088
record $res

# nginx again with SO_REUSEPORT: the master opens a listening socket per worker, each
# worker accepts on its own; the master's rdma_cm listener redirects every request.
name=nginx-reuseport
"$(dirname "$0")/nginx-conf" "$ip" 8089 "$www" reuseport > "$out/nginx-reuseport.conf"
ulimit -l 65536
serve nginx -c "$out/nginx-reuseport.conf" -e stderr
ulimit -l "$memlock"
wait_port 8089
res=ok
got=$(under client curl -sf "http://$ip:8089/big" | sha256sum)
[ "$got" = "$want" ] || { res=FAILED; fail "curl: the 8 MiB file came back different"; }
wrk_rdma 8089
record $res

# A program that sandboxes itself (core/base/sandbox.h): a connection that went over
# RDMA, then a strict system-call filter, then the connection used again. ferry hands
# it back to TCP before the filter and makes no call of its own after it.
name=sandbox
res=ok
for how in prctl syscall; do
  under client env SANDBOX_STAT_CMD="env -u LD_PRELOAD -u FERRY_STATS -u FERRY_LOG_FILE $ferry stat" \
    "$build/tests/sandbox_helper" "$how" "$ip" > "$out/$name.$how.out" 2>&1 &&
    grep -q '^upgraded before the filter: 2$' "$out/$name.$how.out" && grep -q '^sandboxed: 5 bytes back$' "$out/$name.$how.out" ||
    { res=FAILED; fail "$how: $(tail -2 "$out/$name.$how.out")"; }
done
record $res

# sshd and ssh, both under ferry: sshd forks a pre-authentication child that installs a
# system-call filter, then serves the session; 8 MiB up through cat and back.
start_sshd() {  # start_sshd DIR PORT [OPTION...]: keys in DIR, sshd under ferry on PORT
  local dir=$1 port=$2
  shift 2
  ssh-keygen -q -t ed25519 -N '' -f "$dir/host"
  ssh-keygen -q -t ed25519 -N '' -f "$dir/user"
  cp "$dir/user.pub" "$dir/authorized_keys"
  mkdir -p /run/sshd
  printf '%s\n' "Port $port" "ListenAddress $ip" "HostKey $dir/host" "AuthorizedKeysFile $dir/authorized_keys" \
    "PermitRootLogin yes" "StrictModes no" "UsePAM no" "PidFile $dir/sshd.pid" "$@" > "$dir/sshd_config"
  serve /usr/sbin/sshd -D -e -f "$dir/sshd_config"
  wait_port "$port"
}
name=sshd
keys=$(mktemp -d /tmp/sshd.XXXXXX)
start_sshd "$keys" 2222
head -c 8388608 /dev/urandom > "$keys/data"
if under client timeout 300 ssh -i "$keys/user" -o BatchMode=yes -o StrictHostKeyChecking=no \
     -o UserKnownHostsFile=/dev/null -p 2222 "root@$ip" cat < "$keys/data" > "$keys/back" 2> "$out/$name.client.err" &&
   cmp -s "$keys/data" "$keys/back"; then res=ok; else
  res=FAILED; fail "8 MiB through ssh: $(tail -1 "$out/$name.client.err") / $(tail -1 "$out/$name.server.out")"; fi
stop $server
record $res

# mosquitto, the MQTT broker, with its own clients under ferry: 2,000 messages of 1 KiB
# published at QoS 1 and received by a subscriber, in order and intact.
name=mosquitto
work=$(mktemp -d /tmp/mosquitto.XXXXXX)
printf '%s\n' "listener 1883 $ip" "allow_anonymous true" > "$work/mosquitto.conf"
serve mosquitto -c "$work/mosquitto.conf"
wait_port 1883
res=ok
under client timeout 300 mosquitto_sub -h "$ip" -p 1883 -t t -q 1 -C 2000 > "$work/got" 2> "$out/$name.sub.err" &
sub=$!
for _ in $(seq 100); do [ "$(ss -Htn state established "dport = :1883" | wc -l)" -ge 1 ] && break; sleep 0.1; done
python3 -c "print('\n'.join('%05d' % i + 'x' * 1000 for i in range(2000)))" > "$work/sent"
under client timeout 300 mosquitto_pub -h "$ip" -p 1883 -t t -q 1 -l < "$work/sent" > "$out/$name.pub.out" 2>&1 ||
  { res=FAILED; fail "mosquitto_pub: $(tail -1 "$out/$name.pub.out")"; }
wait $sub || { res=FAILED; fail "mosquitto_sub: $(tail -1 "$out/$name.sub.err")"; }
cmp -s "$work/sent" "$work/got" || { res=FAILED; fail "the messages came out different ($(wc -l < "$work/got") lines)"; }
stop $server
rm -rf "$work"
record $res

# socat as a relay in front of a socat echo that forks a cat per connection: 16 MiB
# through both and back, every byte checked.
name=socat
work=$(mktemp -d /tmp/socat.XXXXXX)
head -c 16777216 /dev/urandom > "$work/data"
serve socat "TCP-LISTEN:7501,bind=$ip,reuseaddr,fork" EXEC:cat
echo_pid=$server
wait_port 7501
serve socat "TCP-LISTEN:7502,bind=$ip,reuseaddr,fork" "TCP:$ip:7501"
wait_port 7502
res=ok
under client timeout 300 socat -b 65536 -t 30 - "TCP:$ip:7502" < "$work/data" > "$work/back" 2> "$out/$name.client.out"
cmp -s "$work/data" "$work/back" || { res=FAILED; fail "16 MiB came back different ($(stat -c %s "$work/back") bytes)"; }
stop $server
stop $echo_pid
rm -rf "$work"
record $res

# scp and sftp through sshd (sshd re-executes itself per connection: the connection is
# handed over, and stays on TCP with its new owner): 4 MiB up and down each way.
name=scp-sftp
work=$(mktemp -d /tmp/scp.XXXXXX)
start_sshd "$work" 2223 "Subsystem sftp internal-sftp"
head -c 4194304 /dev/urandom > "$work/data"
o=(-i "$work/user" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null)
res=ok
for step in "scp -P 2223 $work/data root@$ip:$work/scp.up" "scp -P 2223 root@$ip:$work/data $work/scp.down"; do
  read -ra cmd <<< "$step"
  under client timeout 300 "${cmd[0]}" "${o[@]}" "${cmd[@]:1}" >> "$out/$name.client.out" 2>&1 ||
    { res=FAILED; fail "${cmd[0]}: $(tail -1 "$out/$name.client.out")"; }
done
printf '%s\n' "put $work/data $work/sftp.up" "get $work/data $work/sftp.down" > "$work/batch"
under client timeout 300 sftp "${o[@]}" -P 2223 -b "$work/batch" "root@$ip" >> "$out/$name.client.out" 2>&1 ||
  { res=FAILED; fail "sftp: $(tail -1 "$out/$name.client.out")"; }
for f in scp.up scp.down sftp.up sftp.down; do
  cmp -s "$work/data" "$work/$f" || { res=FAILED; fail "$f: 4 MiB came out different"; }
done
stop $server
rm -rf "$work"
record $res

# rsync's daemon and client, both under ferry: 16 MiB down and up, every byte checked.
# The daemon forks a child per connection, and the client forks its receiver, which its
# generator ends with SIGUSR2 once the transfer is over: each connection is handed over
# between processes, and the forked processes' signal handlers must run.
name=rsyncd
work=$(mktemp -d /tmp/rsyncd.XXXXXX)
mkdir -p "$work/mod" "$work/dest"
head -c 16777216 /dev/urandom > "$work/mod/data"
printf '%s\n' "uid = root" "gid = root" "use chroot = no" "pid file = $work/rsyncd.pid" \
  "log file = $out/$name.daemon.log" "[mod]" "path = $work/mod" "read only = no" > "$work/rsyncd.conf"
serve rsync --daemon --no-detach --port 8873 --address "$ip" --config "$work/rsyncd.conf"
wait_port 8873
res=ok
bounded 300 'rsync -a' under client rsync -a "rsync://$ip:8873/mod/data" "$work/dest/down" >> "$out/$name.client.out" 2>&1 ||
  { res=FAILED; fail "down: $(grep -m1 rsync "$out/$name.client.out")"; }
bounded 300 'rsync -a' under client rsync -a "$work/mod/data" "rsync://$ip:8873/mod/up" >> "$out/$name.client.out" 2>&1 ||
  { res=FAILED; fail "up: $(grep -m1 rsync "$out/$name.client.out")"; }
for f in dest/down mod/up; do
  cmp -s "$work/mod/data" "$work/$f" || { res=FAILED; fail "$f: 16 MiB came out different"; }
done
stop $server
rm -rf "$work"
record $res

# A connection carried through io_uring after a hello by send and recv (core/base/uring.h):
# at the server (io_uring-server) or at the client (io_uring-client), the other end
# making plain calls. The ring's end hands its upgraded connection back to TCP before
# its ring exists and keeps its next connection there; every byte echoed as on kernel
# TCP.
helper=$build/tests/uring_helper
for end in server client; do
  name=io_uring-$end
  port=7400
  [ $end = server ] && modes=(uring plain) || modes=(plain uring)
  for setup in plain ferry; do
    port=$((port + 1))
    run=()
    [ $setup = ferry ] && run=(env URING_STAT_CMD="env -u LD_PRELOAD -u FERRY_STATS -u FERRY_LOG_FILE $ferry stat")
    if [ $setup = ferry ]; then serve "${run[@]}" "$helper" serve "$ip" $port "${modes[0]}"
    else "$helper" serve "$ip" $port "${modes[0]}" > "$out/$name.server.out" 2>&1 & server=$!; fi
    wait_port $port
    if [ $setup = ferry ]; then under client "${run[@]}" timeout 120 "$helper" connect "$ip" $port "${modes[1]}" $((4 << 20))
    else timeout 120 "$helper" connect "$ip" $port "${modes[1]}" $((4 << 20)); fi > "$out/$name.client.out" 2>&1
    wait $server
    cat "$out/$name.server.out" "$out/$name.client.out" | grep -v '^upgraded' > "$out/$name.$setup.ends"
  done
  res=ok
  cmp -s "$out/$name.plain.ends" "$out/$name.ferry.ends" ||
    { res=FAILED; fail "the ends saw something else than on kernel TCP: $(tr '\n' ' ' < "$out/$name.ferry.ends")"; }
  for side in server client; do
    grep -q '^upgraded before the ring: 1$' "$out/$name.$side.out" ||
      { res=FAILED; fail "$side: not upgraded before the ring, the scenario proves nothing"; }
  done
  [ "$(sum tcp_io_uring $end)" -ge 1 ] || { res=FAILED; fail "the ring's end kept no connection on TCP (tcp_io_uring)"; }
  [ "$(sum downgrades_handoff $end)" -ge 1 ] ||
    { res=FAILED; fail "the ring's end did not hand its upgraded connection to TCP (downgrades_handoff)"; }
  record $res
done

# ferry ss against running processes: an epoll server under ferry holds 40 connections
# of a client under ferry and 10 of a client that a rules file keeps on TCP, all idle
# while ss looks (once none is still upgrading). Each process lists every connection
# once, with its descriptor, path, reason if on TCP and registered memory, as many on
# RDMA as its counters say upgraded, and the bytes each carried.
name=ferry-ss
work=$(mktemp -d /tmp/ferry-ss.XXXXXX)
check=$(cd "$(dirname "$0")" && pwd)/ss_check.py
printf 'tcp\n' > "$work/rules"
# The server's wait for a request is short here: the kept client never asks.
FERRY_UPGRADE_TIMEOUT_MS=3000 serve "$build/conn_bench" epoll-server "$ip" 7600
wait_port 7600
res=ok
under client "$build/conn_bench" many "$ip" 7600 40 16384 300 > "$out/$name.client.out" 2>&1 &
on=$!
FERRY_RULES=$work/rules under kept "$build/conn_bench" many "$ip" 7600 10 16384 300 > "$out/$name.kept.out" 2>&1 &
kept=$!
for _ in $(seq 1200); do  # 120 s: a limit for hangs
  "$ferry" ss -j $server > "$work/server.json" 2> "$work/ss.err"
  python3 "$check" settled "$work/server.json" 50 && break
  sleep 0.1
done
"$ferry" ss $server > "$out/$name.ss.txt" 2>&1
# The clients' own processes (under, in the background, runs them in a subshell).
for who in server:$server on:$(pgrep -f "conn_bench many $ip 7600 40 " | tail -1) \
  kept:$(pgrep -f "conn_bench many $ip 7600 10 " | tail -1); do
  "$ferry" ss -j ${who#*:} > "$work/${who%%:*}.json" 2>> "$work/ss.err"
  "$ferry" stat ${who#*:} > "$work/${who%%:*}.stat" 2>> "$work/ss.err"
done
python3 "$check" server "$work/server.json" "$work/server.stat" 7600 50 $((16384 + 24)) > "$work/server.check" ||
  { res=FAILED; fail "server: $(cat "$work/server.check")"; }
python3 "$check" client "$work/on.json" "$work/on.stat" 40 - > "$work/on.check" ||
  { res=FAILED; fail "client: $(cat "$work/on.check")"; }
python3 "$check" client "$work/kept.json" "$work/kept.stat" 10 tcp_rule > "$work/kept.check" ||
  { res=FAILED; fail "kept client: $(cat "$work/kept.check")"; }
[ ! -s "$work/ss.err" ] || { res=FAILED; fail "ferry ss: $(head -1 "$work/ss.err")"; }
echo "[$name] $(cat "$work/server.check"); $(cat "$work/on.check"); kept $(cat "$work/kept.check")"
pkill -f "conn_bench many $ip 7600 "
wait $on $kept 2>/dev/null
stop $server
rm -rf "$work"
record $res

printf '\n%-16s %-6s %9s %14s %14s  %s\n' program result upgraded rdma_sent tcp_sent "kept on TCP (reason=connections)"
printf '%s\n' "${rows[@]}"
verdict programs
