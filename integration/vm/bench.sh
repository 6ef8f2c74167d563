#!/usr/bin/env bash
# Inside the test bed: the benchmark table. Raw verbs, kernel TCP, rsocket's preload
# (librspreload) and ferry, side by side in one boot, each figure the median of RUNS runs
# of SECONDS each. Every run of every system is attempted; a program that fails under a
# system is recorded with its error. Never fails on a number.
#   bench.sh BUILD_DIR [RUNS] [SECONDS] [BASE_BUILD_DIR|-] [ROWS]
# BASE_BUILD_DIR: ferry from that build too, as system "base" (a change's before).
# ROWS: comma-separated, of verbs,pingpong,iperf,sockperf,redis,nginx,connect,links.
# In the two-host test bed (integration/testbed --hosts 2) it runs on both guests, which
# walk the same pairs in the same order: every server runs on host 1 (198.18.0.1), every
# client on host 2, and each pair meets in $TESTBED_SHARED (see across). Host 2 records
# the figures and prints the table; host 1 leaves its servers' logs in $TESTBED_SHARED/logs
# for it (and in its own $VM_OUT/logs).
set -uo pipefail
build=$1
runs=${2:-3}
secs=${3:-5}
base=${4:--}
rows=,${5:-verbs,pingpong,iperf,sockperf,redis,nginx,connect,links},
row() { [[ $rows == *,$1,* ]]; }
ip=${TESTBED_IP:?run inside integration/testbed}
hosts=${TESTBED_HOSTS:-1}
if [ "$hosts" = 2 ]; then
  host=$TESTBED_HOST shared=$TESTBED_SHARED
  # The servers' address: host 1's own, host 2's peer.
  [ "$host" = 1 ] || ip=$TESTBED_PEER_IP
  meeting=0  # the pairs so far: both hosts count the same ones
fi
export PATH=$PATH:/usr/sbin:/sbin
ulimit -l 65536  # nginx workers drop root: their rings count against this (README)
out=${VM_OUT:-/tmp/bench-out}
here=$(cd "$(dirname "$0")" && pwd)
rspreload=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -1)
res=/tmp/bench-results
rm -rf "$res"; mkdir -p "$res" "$out/logs"
if [ "$hosts" = 2 ]; then
  mkdir -p "$shared/logs"
  # read -t on a pipe nobody writes: a pause that starts no process, so that waiting for
  # the other host costs the server next to it next to nothing.
  rm -f /tmp/bench-nap; mkfifo /tmp/bench-nap
fi
cd /tmp
port=20000
limit=$((secs * 4 + 30))  # no single program may take longer than this

prefix() {  # prefix SYSTEM: the words that run a program as SYSTEM, in $pre
  case $1 in
    tcp) pre=() ;;
    rsocket) pre=(env "LD_PRELOAD=$rspreload") ;;
    ferry) pre=(env FERRY_STATS=1 "FERRY_LOG_FILE=$out/logs/$tag.${host:+h$host.}%p.log" "$build/ferry") ;;
    base) pre=(env FERRY_STATS=1 "FERRY_LOG_FILE=$out/logs/$tag.${host:+h$host.}%p.log" "$base/ferry") ;;
  esac
}

server_stat() {  # server_stat: the running server's counters, when it runs under a ferry
                # (named as its log is, by pid: one process counts once), and the CPU
                # time it used (user + system, in clock ticks)
  awk '{print $14 + $15}' "/proc/$server/stat" > "$out/logs/$tag.server.cpu" 2>/dev/null
  case $system in
    ferry) "$build/ferry" stat "$server" > "$out/logs/$tag.${host:+h$host.}$server.stat" 2>/dev/null ;;
    base) "$base/ferry" stat "$server" > "$out/logs/$tag.${host:+h$host.}$server.stat" 2>/dev/null ;;
  esac
}
note() {  # note METRIC SYSTEM VALUE: one run's figure
  echo "$3" >> "$res/$1.$2"
}
failed() {  # failed METRIC SYSTEM WHY: this run failed; the first reason is kept
  [ -s "$res/$1.$2.err" ] || echo "$3" | tr '\r\n' '  ' | cut -c1-160 > "$res/$1.$2.err"
}
why() {  # why: the first line of the pair's output that looks like an error
  local w slogs=$out/logs
  [ "$hosts" != 2 ] || slogs=$shared/logs  # the server's, from host 1
  w=$(cat "$out/logs/$tag.out" "$slogs/$tag.server.out" 2>/dev/null | tr '\r' '\n' |
    grep -v WARNING | grep -ihE 'error|fail|abort|fault|refused|crash|signal|reset|denied' | head -1)
  echo "${w:-no result (exited, or killed after ${limit}s)}"
}

listening() {  # listening: until the server listens on $port (3 s at most)
  for _ in $(seq 30); do ss -Hltn "sport = :$port" | grep -q LISTEN && break; sleep 0.1; done
  sleep 0.2  # rsocket listens over rdma_cm only: ss cannot see it
}
stop() {  # stop: the server, with SIGTERM, then after 5 s with SIGKILL
  kill "$server" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$server" 2>/dev/null
  wait "$server" 2>/dev/null
}

pair() {  # pair SYSTEM TAG SERVER... -- CLIENT...: both ends as SYSTEM; the client's status
  local system=$1 sargs=() status
  tag=$2; shift 2
  prefix "$system"
  if [ "$hosts" = 2 ]; then
    across listening "$out/logs/$tag.server.out" "$out/logs/$tag.out" "$@"
    return
  fi
  while [ "$1" != -- ]; do sargs+=("$1"); shift; done
  shift
  "${pre[@]}" "${sargs[@]}" > "$out/logs/$tag.server.out" 2>&1 &
  server=$!
  listening
  timeout -k 5 $limit "${pre[@]}" "$@" > "$out/logs/$tag.out" 2>&1
  status=$?
  server_stat
  stop
  return $status
}

# Two hosts: host 1 and host 2 walk the same pairs, and for each say in the shared
# directory how far they are: N.ready (host 1's server is up), N.done (host 2's client
# finished), N.stopped (host 1 stopped the server and left its logs in shared/logs).
signal() {  # signal WORD: this pair's WORD for the other host (whole, or not at all)
  echo "$tag" > "$shared/$meeting.$1.tmp" && mv "$shared/$meeting.$1.tmp" "$shared/$meeting.$1"
}
await() {  # await WORD SECONDS: whether the other host said this pair's WORD in time
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ -e "$shared/$meeting.$1" ] && return 0
    read -rt 0.1 <> /tmp/bench-nap
  done
  return 1
}
# across READY SERVER_OUT CLIENT_OUT SERVER... -- CLIENT...: one pair across the wire,
# each end prefixed by $pre: on host 1 the server, which is up once the command READY
# returns; on host 2 the client. Host 2 returns the client's status, host 1 nonzero (it
# measures nothing).
across() {
  local ready=$1 sout=$2 cout=$3 sargs=() status=1
  shift 3
  while [ "$1" != -- ]; do sargs+=("$1"); shift; done
  shift
  meeting=$((meeting + 1))
  if [ "$host" = 1 ]; then
    "${pre[@]}" "${sargs[@]}" > "$sout" 2>&1 &
    server=$!
    $ready
    signal ready
    await "done" $((limit + 60)) || echo "bench: $tag: host 2's client never finished" >&2
    server_stat
    stop
    cp "$out/logs/$tag".* "$shared/logs/" 2>/dev/null
    signal stopped
    return 1
  fi
  if ! await ready $((limit + 60)); then
    echo "bench: failed: host 1 did not start the server within $((limit + 60))s" > "$cout"
  elif [ "$(cat "$shared/$meeting.ready")" != "$tag" ]; then
    echo "bench: failed: host 1 is at $(cat "$shared/$meeting.ready"), not $tag" | tee "$cout" >&2
  else
    timeout -k 5 $limit "${pre[@]}" "$@" > "$cout" 2>&1
    status=$?
    # A last line for a client that could not say why (perftest's rows report the last
    # line; why picks a crash, but a timeout's cause may be in the server's output).
    case $status in
      124|137) echo "bench: killed after ${limit}s, no result" >> "$cout" ;;
      *) [ $status -le 128 ] ||
        echo "bench: the client died of signal $((status - 128)) (SIG$(kill -l $((status - 128))))" >> "$cout" ;;
    esac
  fi
  signal "done"
  await stopped 60 || echo "bench: $tag: host 1 never stopped its server" >&2
  return $status
}

pingpong() {  # pingpong SYSTEM SIZE
  local system=$1 size=$2
  port=$((port + 1))
  if pair "$system" pp$size.$system.$r sockperf server --tcp -i "$ip" -p $port -- \
       sockperf ping-pong --tcp -i "$ip" -p $port -t "$secs" -m "$size" &&
     grep -q 'percentile 50.000' "$out/logs/$tag.out"; then
    note pp${size}_p50 "$system" "$(awk '/percentile 50.000/ {print $NF}' "$out/logs/$tag.out")"
    note pp${size}_p99 "$system" "$(awk '/percentile 99.000/ {print $NF}' "$out/logs/$tag.out")"
  else
    failed pp${size}_p50 "$system" "sockperf ping-pong: $(why)"
    failed pp${size}_p99 "$system" "sockperf ping-pong: $(why)"
  fi
}

iperf() {  # iperf SYSTEM
  local system=$1
  port=$((port + 1))
  if pair "$system" iperf3.$system.$r iperf3 -s -1 -B "$ip" -p $port -- \
       iperf3 -c "$ip" -p $port -t "$secs" -l 64K -f g && grep -q receiver "$out/logs/$tag.out" &&
     ! grep -q ' 0.00 Bytes .*receiver' "$out/logs/$tag.out"; then
    note iperf3_gbps "$system" "$(awk '/receiver/ {print $(NF-2)}' "$out/logs/$tag.out")"
  else
    grep -q ' 0.00 Bytes .*receiver' "$out/logs/$tag.out" 2>/dev/null && failed iperf3_gbps "$system" "iperf3: no byte arrived"
    failed iperf3_gbps "$system" "iperf3: $(why)"
  fi
}

sockperf_tp() {  # sockperf_tp SYSTEM
  local system=$1
  port=$((port + 1))
  if pair "$system" sptp.$system.$r sockperf server --tcp -i "$ip" -p $port -- \
       sockperf throughput --tcp -i "$ip" -p $port -t "$secs" -m 65000 &&
     grep -q 'Summary: BandWidth' "$out/logs/$tag.out"; then
    note sockperf_tp_gbps "$system" "$(sed -n 's/.*Summary: BandWidth is .*(\([0-9.]*\) Mbps).*/\1/p' \
      "$out/logs/$tag.out" | awk '{print $1 / 1000}')"
  else
    failed sockperf_tp_gbps "$system" "sockperf throughput: $(why)"
  fi
}

redis() {  # redis SYSTEM
  local system=$1
  port=$((port + 1))
  if pair "$system" redis.$system.$r \
       redis-server --port $port --bind "$ip" --protected-mode no --save '' --appendonly no -- \
       redis-benchmark -h "$ip" -p $port -c 50 -P 16 -t set,get -n $((secs * 20000)) --csv &&
     grep -q '"GET"' "$out/logs/$tag.out"; then
    note redis_set_rps "$system" "$(awk -F'"' '$2 == "SET" {print $4}' "$out/logs/$tag.out")"
    note redis_get_rps "$system" "$(awk -F'"' '$2 == "GET" {print $4}' "$out/logs/$tag.out")"
    cpu_per "$system" redis_cpu_us $((2 * secs * 20000))
  else
    failed redis_set_rps "$system" "redis-benchmark: $(why)"
    failed redis_get_rps "$system" "redis-benchmark: $(why)"
  fi
}

# nginx (master + 4 workers, sendfile on) serving a 4 KiB file to wrk's 16 keep-alive
# connections: a multi-process server, its connections redirected to the workers.
www=$(mktemp -d /tmp/bench-www.XXXXXX)
chmod 755 "$www"
head -c 4096 /dev/urandom > "$www/small"
chmod 644 "$www/small"
nginx_rps() {  # nginx_rps SYSTEM
  local system=$1 conf
  port=$((port + 1))
  conf=$out/logs/nginx.$port.conf
  "$here/nginx-conf" "$ip" $port "$www" > "$conf"
  if pair "$system" nginx.$system.$r nginx -c "$conf" -e stderr -- \
       wrk -t 2 -c 16 -d "${secs}s" "http://$ip:$port/small" &&
     grep -q 'Requests/sec' "$out/logs/$tag.out" && ! grep -q 'Non-2xx' "$out/logs/$tag.out"; then
    note nginx_rps "$system" "$(awk '/Requests\/sec/ {print $2}' "$out/logs/$tag.out")"
  else
    failed nginx_rps "$system" "nginx + wrk: $(why)"
  fi
}

# cpu_per SYSTEM METRIC REQUESTS: the server's CPU time per request of the last pair,
# in microseconds (one host only: across two, the server's host keeps its own).
cpu_per() {
  local ticks
  ticks=$(cat "$out/logs/$tag.server.cpu" 2>/dev/null) || return 0
  [ -n "$ticks" ] && note "$2" "$1" "$(awk -v t="$ticks" -v n="$3" -v hz="$(getconf CLK_TCK)" 'BEGIN {print t * 1e6 / hz / n}')"
}

# redis-benchmark -c 50 without pipelining: every request waits for its reply.
redis_np() {  # redis_np SYSTEM
  local system=$1 n=$((secs * 4000))
  port=$((port + 1))
  if pair "$system" redisnp.$system.$r \
       redis-server --port $port --bind "$ip" --protected-mode no --save '' --appendonly no -- \
       redis-benchmark -h "$ip" -p $port -c 50 -t set,get -n $n --csv &&
     grep -q '"GET"' "$out/logs/$tag.out"; then
    note redis_np_set_rps "$system" "$(awk -F'"' '$2 == "SET" {print $4}' "$out/logs/$tag.out")"
    note redis_np_get_rps "$system" "$(awk -F'"' '$2 == "GET" {print $4}' "$out/logs/$tag.out")"
    cpu_per "$system" redis_np_cpu_us $((2 * n))
  else
    failed redis_np_set_rps "$system" "redis-benchmark: $(why)"
    failed redis_np_get_rps "$system" "redis-benchmark: $(why)"
  fi
}

# A fresh connection's first bytes: 16 MiB sent at once on a new connection to a
# server that forks per connection (the share of them over RDMA is in ferry's counters).
fresh() {  # fresh SYSTEM
  local system=$1
  port=$((port + 1))
  if pair "$system" fresh.$system.$r "$build/conn_bench" fork-server "$ip" $port -- \
       "$build/conn_bench" oneway "$ip" $port $((16 << 20)) && grep -q 'MB/s' "$out/logs/$tag.out"; then
    note fresh_mbps "$system" "$(awk '/MB\/s/ {print $2}' "$out/logs/$tag.out")"
  else
    failed fresh_mbps "$system" "conn_bench oneway: $(why)"
  fi
}

# A connection per request through a forking server: 2 MiB each way on each.
fork2m() {  # fork2m SYSTEM
  local system=$1
  port=$((port + 1))
  if pair "$system" fork2m.$system.$r "$build/conn_bench" fork-server "$ip" $port -- \
       "$build/conn_bench" reqresp "$ip" $port $((secs * 8)) $((2 << 20)) && grep -q 'connections/s' "$out/logs/$tag.out"; then
    note fork2m_cps "$system" "$(awk '/connections\/s/ {print $2}' "$out/logs/$tag.out")"
  else
    failed fork2m_cps "$system" "conn_bench reqresp: $(why)"
  fi
}

# Many connections at once between one client and one server process (one epoll loop
# each), under a locked-memory limit of 256 MiB: opened in one burst, 16 KiB each way on
# each, 10 s idle (both ends' counters read then), and the same again. 10,000
# connections, or 2,000 in runs shorter than 3 s (the smoke run).
many_conns=$((secs >= 3 ? 10000 : 2000))
many() {  # many SYSTEM (one host only)
  local system=$1 client status=1
  port=$((port + 1))
  tag=many.$system.$r
  prefix "$system"
  (ulimit -l 262144 -n 30000 && exec "${pre[@]}" "$build/conn_bench" epoll-server "$ip" $port) > "$out/logs/$tag.server.out" 2>&1 &
  server=$!
  listening
  (ulimit -l 262144 -n 30000 && exec timeout -k 5 $((limit + 240)) "${pre[@]}" "$build/conn_bench" many "$ip" $port \
    $many_conns 16384 10) > "$out/logs/$tag.out" 2>&1 &
  client=$!
  for _ in $(seq $(((limit + 240) * 10))); do
    grep -q 'burst s:' "$out/logs/$tag.out" 2>/dev/null || ! kill -0 $client 2>/dev/null && break
    sleep 0.1
  done
  if [ "$system" = ferry ] && grep -q 'burst s:' "$out/logs/$tag.out"; then
    sleep 1  # the last upgrades settle
    "$build/ferry" stat "$server" > "$out/logs/many.idle.$r.server.stat" 2>/dev/null
    "$build/ferry" stat "$(pgrep -f "conn_bench many $ip $port" | tail -1)" > "$out/logs/many.idle.$r.client.stat" 2>/dev/null
  fi
  wait $client && status=0
  server_stat
  stop
  if [ $status = 0 ] && grep -q "intact: $many_conns of" "$out/logs/$tag.out"; then
    note many_s "$system" "$(awk '/burst s:/ {print $3}' "$out/logs/$tag.out")"
  else
    failed many_s "$system" "conn_bench many: $(why)"
  fi
}

connect_rate() {  # connect_rate SYSTEM
  local system=$1
  port=$((port + 1))
  if pair "$system" conn.$system.$r "$build/connect_rate" server "$ip" $port -- \
       "$build/connect_rate" client "$ip" $port "$secs" && grep -q 'connections/s' "$out/logs/$tag.out"; then
    note connect_rate "$system" "$(awk '/connections\/s/ {print $2}' "$out/logs/$tag.out")"
  else
    failed connect_rate "$system" "connect_rate: $(why)"
  fi
}

cm_listening() {  # cm_listening: until a perftest server listens over rdma_cm (4 s at most)
  sleep 1
  for _ in $(seq 30); do rdma resource show cm_id 2>/dev/null | grep -q LISTEN && break; sleep 0.1; done
}
perftest() {  # perftest OUT SERVER... -- CLIENT...: a perftest pair over rdma_cm; the client's status
  local cout=$1 sargs=() status tag system=verbs
  shift
  if [ "$hosts" = 2 ]; then
    pre=() tag=${cout##*/}; tag=${tag%.out}
    across cm_listening "${cout%.out}.server.out" "$cout" "$@"
    return
  fi
  while [ "$1" != -- ]; do sargs+=("$1"); shift; done
  shift
  "${sargs[@]}" > /dev/null 2>&1 &
  server=$!; sleep 1
  timeout -k 5 $limit "$@" > "$cout" 2>&1
  status=$?
  kill $server 2>/dev/null; wait $server 2>/dev/null
  return $status
}

verbs() {  # raw RDMA WRITE between two processes over rdma_cm: the test bed's limit
  local tag=verbs.$r
  for size in 64 4096; do
    if perftest "$out/logs/$tag.lat$size.out" ib_write_lat -R -s $size -n $((secs * 2000)) -- \
         ib_write_lat -R -s $size -n $((secs * 2000)) "$ip"; then
      note pp${size}_p50 verbs "$(awk -v s=$size '$1 == s {print $5}' "$out/logs/$tag.lat$size.out")"
      note pp${size}_p99 verbs "$(awk -v s=$size '$1 == s {print $8}' "$out/logs/$tag.lat$size.out")"
    else
      failed pp${size}_p50 verbs "ib_write_lat: $(tail -1 "$out/logs/$tag.lat$size.out" 2>/dev/null)"
    fi
  done
  # The same exchange with SEND/RECV, which (like ferry's WRITE WITH IMMEDIATE) takes a
  # receive completion per message, where ib_write_lat polls the last byte in memory.
  if perftest "$out/logs/$tag.send64.out" ib_send_lat -R -s 64 -n $((secs * 2000)) -- \
       ib_send_lat -R -s 64 -n $((secs * 2000)) "$ip"; then
    note send64_p50 verbs "$(awk '$1 == 64 {print $5}' "$out/logs/$tag.send64.out")"
  else
    failed send64_p50 verbs "ib_send_lat: $(tail -1 "$out/logs/$tag.send64.out" 2>/dev/null)"
  fi
  if perftest "$out/logs/$tag.bw.out" ib_write_bw -R -s 65536 -D "$secs" --report_gbits -- \
       ib_write_bw -R -s 65536 -D "$secs" --report_gbits "$ip"; then
    local bw; bw=$(awk '$1 == 65536 {print $4}' "$out/logs/$tag.bw.out")
    note iperf3_gbps verbs "$bw"
    note sockperf_tp_gbps verbs "$bw"
  else
    failed iperf3_gbps verbs "ib_write_bw: $(tail -1 "$out/logs/$tag.bw.out" 2>/dev/null)"
  fi
}

"$build/ferry" true  # warm the page cache
for r in $(seq "$runs"); do
  echo "bench: run $r of $runs" >&2
  ! row verbs || verbs
  # Alternate the order run by run so that drift in the machine hits every system alike.
  systems="tcp rsocket ferry"
  [ "$base" = - ] || systems="tcp rsocket base ferry"
  [ $((r % 2)) -eq 0 ] && systems=$(echo "$systems" | tr ' ' '\n' | tac | tr '\n' ' ')
  if row pingpong; then
    for s in $systems; do pingpong "$s" 64; done
    for s in $systems; do pingpong "$s" 4096; done
  fi
  ! row iperf || for s in $systems; do iperf "$s"; done
  ! row sockperf || for s in $systems; do sockperf_tp "$s"; done
  ! row redis || for s in $systems; do redis "$s"; done
  ! row nginx || for s in $systems; do nginx_rps "$s"; done
  ! row connect || for s in $systems; do connect_rate "$s"; done
  if row links; then
    for s in $systems; do redis_np "$s"; done
    for s in $systems; do fresh "$s"; done
    for s in $systems; do fork2m "$s"; done
    # rsocket's preload runs no epoll server of 10,000 connections; two hosts: not yet.
    [ "$hosts" = 2 ] || for s in $systems; do [ "$s" = rsocket ] || many "$s"; done
  fi
done

if [ "$hosts" = 2 ]; then
  # Host 2 has the figures, and host 1's servers' logs in the shared directory.
  if [ "$host" = 1 ]; then echo "bench: host 1: every pair served" >&2; exit 0; fi
  python3 "$here/bench_report.py" "$res" "$out/logs:$shared/logs" "$runs" "$secs" "$out/bench.json" 2 |
    tee "$out/table.txt"
  exit
fi
MANY_CONNS=$many_conns python3 "$here/bench_report.py" "$res" "$out/logs" "$runs" "$secs" "$out/bench.json"
