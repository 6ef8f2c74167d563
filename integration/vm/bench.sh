#!/usr/bin/env bash
# Inside the test bed: the benchmark table. Raw verbs, kernel TCP, rsocket's preload
# (librspreload) and ferry, side by side in one boot, each figure the median of RUNS runs
# of SECONDS each. Every run of every system is attempted; a program that fails under a
# system is recorded with its error. Never fails on a number.
#   bench.sh BUILD_DIR [RUNS] [SECONDS]
set -uo pipefail
build=$1
runs=${2:-3}
secs=${3:-5}
ip=${TESTBED_IP:?run inside integration/testbed}
export PATH=$PATH:/usr/sbin:/sbin
ulimit -l 65536  # nginx workers drop root: their rings count against this (README)
out=${VM_OUT:-/tmp/bench-out}
here=$(cd "$(dirname "$0")" && pwd)
rspreload=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -1)
res=/tmp/bench-results
rm -rf "$res"; mkdir -p "$res" "$out/logs"
cd /tmp
port=20000
limit=$((secs * 4 + 30))  # no single program may take longer than this

prefix() {  # prefix SYSTEM: the words that run a program as SYSTEM, in $pre
  case $1 in
    tcp) pre=() ;;
    rsocket) pre=(env "LD_PRELOAD=$rspreload") ;;
    ferry) pre=(env FERRY_STATS=1 "FERRY_LOG_FILE=$out/logs/$tag.%p.log" "$build/ferry") ;;
  esac
}

note() {  # note METRIC SYSTEM VALUE: one run's figure
  echo "$3" >> "$res/$1.$2"
}
failed() {  # failed METRIC SYSTEM WHY: this run failed; the first reason is kept
  [ -s "$res/$1.$2.err" ] || echo "$3" | tr '\r\n' '  ' | cut -c1-160 > "$res/$1.$2.err"
}
why() {  # why: the first line of the pair's output that looks like an error
  local w
  w=$(cat "$out/logs/$tag.out" "$out/logs/$tag.server.out" 2>/dev/null | tr '\r' '\n' |
    grep -v WARNING | grep -ihE 'error|fail|abort|fault|refused|crash|signal|reset|denied' | head -1)
  echo "${w:-no result (exited, or killed after ${limit}s)}"
}

pair() {  # pair SYSTEM TAG SERVER... -- CLIENT...: both ends as SYSTEM; the client's status
  local system=$1 sargs=() status
  tag=$2; shift 2
  while [ "$1" != -- ]; do sargs+=("$1"); shift; done
  shift
  prefix "$system"
  "${pre[@]}" "${sargs[@]}" > "$out/logs/$tag.server.out" 2>&1 &
  server=$!
  for _ in $(seq 30); do ss -Hltn "sport = :$port" | grep -q LISTEN && break; sleep 0.1; done
  sleep 0.2  # rsocket listens over rdma_cm only: ss cannot see it
  timeout -k 5 $limit "${pre[@]}" "$@" > "$out/logs/$tag.out" 2>&1
  status=$?
  [ "$system" = ferry ] && "$build/ferry" stat "$server" > "$out/logs/$tag.server.stat" 2>/dev/null
  kill "$server" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$server" 2>/dev/null
  wait "$server" 2>/dev/null
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
    grep -q ' 0.00 Bytes .*receiver' "$out/logs/$tag.out" && failed iperf3_gbps "$system" "iperf3: no byte arrived"
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

verbs() {  # raw RDMA WRITE between two processes over rdma_cm: the test bed's limit
  local tag=verbs.$r
  for size in 64 4096; do
    ib_write_lat -R -s $size -n $((secs * 2000)) > /dev/null 2>&1 &
    server=$!; sleep 1
    if timeout -k 5 $limit ib_write_lat -R -s $size -n $((secs * 2000)) "$ip" > "$out/logs/$tag.lat$size.out" 2>&1; then
      note pp${size}_p50 verbs "$(awk -v s=$size '$1 == s {print $5}' "$out/logs/$tag.lat$size.out")"
      note pp${size}_p99 verbs "$(awk -v s=$size '$1 == s {print $8}' "$out/logs/$tag.lat$size.out")"
    else
      failed pp${size}_p50 verbs "ib_write_lat: $(tail -1 "$out/logs/$tag.lat$size.out")"
    fi
    kill $server 2>/dev/null; wait $server 2>/dev/null
  done
  # The same exchange with SEND/RECV, which (like ferry's WRITE WITH IMMEDIATE) takes a
  # receive completion per message, where ib_write_lat polls the last byte in memory.
  ib_send_lat -R -s 64 -n $((secs * 2000)) > /dev/null 2>&1 &
  server=$!; sleep 1
  if timeout -k 5 $limit ib_send_lat -R -s 64 -n $((secs * 2000)) "$ip" > "$out/logs/$tag.send64.out" 2>&1; then
    note send64_p50 verbs "$(awk '$1 == 64 {print $5}' "$out/logs/$tag.send64.out")"
  else
    failed send64_p50 verbs "ib_send_lat: $(tail -1 "$out/logs/$tag.send64.out")"
  fi
  kill $server 2>/dev/null; wait $server 2>/dev/null
  ib_write_bw -R -s 65536 -D "$secs" --report_gbits > /dev/null 2>&1 &
  server=$!; sleep 1
  if timeout -k 5 $limit ib_write_bw -R -s 65536 -D "$secs" --report_gbits "$ip" > "$out/logs/$tag.bw.out" 2>&1; then
    local bw; bw=$(awk '$1 == 65536 {print $4}' "$out/logs/$tag.bw.out")
    note iperf3_gbps verbs "$bw"
    note sockperf_tp_gbps verbs "$bw"
  else
    failed iperf3_gbps verbs "ib_write_bw: $(tail -1 "$out/logs/$tag.bw.out")"
  fi
  kill $server 2>/dev/null; wait $server 2>/dev/null
}

"$build/ferry" true  # warm the page cache
for r in $(seq "$runs"); do
  echo "bench: run $r of $runs" >&2
  verbs
  # Alternate the order run by run so that drift in the machine hits every system alike.
  systems="tcp rsocket ferry"; [ $((r % 2)) -eq 0 ] && systems="ferry rsocket tcp"
  for s in $systems; do pingpong "$s" 64; done
  for s in $systems; do pingpong "$s" 4096; done
  for s in $systems; do iperf "$s"; done
  for s in $systems; do sockperf_tp "$s"; done
  for s in $systems; do redis "$s"; done
  for s in $systems; do nginx_rps "$s"; done
  for s in $systems; do connect_rate "$s"; done
done

python3 "$here/bench_report.py" "$res" "$out/logs" "$runs" "$secs" "$out/bench.json"
