#!/usr/bin/env bash
# What ferry costs a connection that stays on kernel TCP. Runs each workload under each
# setup, setups in alternating order run by run, and prints the medians of RUNS runs
# and each setup's ratio to plain (the median of the runs' ratios, each run's setups
# side by side). Natively (loopback, never upgraded) or inside the
# test bed over $TESTBED_IP (upgrades refused). Never fails on a number.
#   passthrough.sh BUILD_DIR RUNS SECONDS native|vm PG_TEMPLATE [WORKLOADS [OUT_DIR]]
# WORKLOADS: any of redis iperf3 connect pgbench fork (default all); OUT_DIR: default
# $VM_OUT.
# PG_TEMPLATE: a PostgreSQL data directory made by `passthrough.sh --pg-template DIR`
# (initdb and pgbench -i take minutes in the emulated VM: they run on the host).
# Setups (server/client): plain = plain/plain; ferry = ferry/ferry on loopback;
# client = plain server, client under ferry (its upgrade is refused: no rdma_cm listener);
# server = server under ferry with the device (rdma_cm listening, rdma-core loaded), plain
# client (no request comes: the server gives up waiting once the client sent);
# nodev = both under ferry with FERRY_DEVICES naming no device. (Both ends under ferry
# with a device is no passthrough: PostgreSQL's backends upgrade their connections.)
# fork_rate is a server: it runs as each setup's server end, with a client from the
# setup's client end (so client's is plain's).
set -uo pipefail
as_nobody=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
if [ "$1" = --pg-template ]; then  # --pg-template DIR: a cluster with pgbench's tables
  set -e
  t=$2
  mkdir -p "$t"; chown nobody "$t"
  "${as_nobody[@]}" "$pg_bin/initdb" -D "$t/data" -A trust -U postgres --no-sync > "$t/initdb.out" 2>&1
  echo "host all all 0.0.0.0/0 trust" >> "$t/data/pg_hba.conf"
  "${as_nobody[@]}" "$pg_bin/pg_ctl" -D "$t/data" -w -o "-c listen_addresses='' -k $t" -l "$t/server.log" start > /dev/null
  "$pg_bin/pgbench" -h "$t" -U postgres -i -s 1 -q postgres > "$t/pgbench-init.out" 2>&1 || status=$?
  "${as_nobody[@]}" "$pg_bin/pg_ctl" -D "$t/data" -w -m fast stop > /dev/null
  exit "${status:-0}"
fi
build=$1
runs=$2
secs=$3
where=$4
template=$5
workloads=${6:-redis iperf3 connect pgbench fork}
out=${7:-${VM_OUT:-/tmp/passthrough-out}}
here=$(cd "$(dirname "$0")" && pwd)
if [ "$where" = vm ]; then
  ip=${TESTBED_IP:?run inside integration/testbed}
  setups="plain client server nodev"
  pg_setups="plain client server nodev"
  redis_n=$((secs * 1500))
else
  ip=127.0.0.1
  setups="plain ferry"
  pg_setups="plain ferry"
  redis_n=$((secs * 15000))
fi
res=$(mktemp -d)
logs=$out/logs
mkdir -p "$logs"
chmod 1777 "$logs"  # the PostgreSQL server runs as nobody
limit=$((secs * 6 + 60))
port=$((21000 + RANDOM % 20000))

# side SETUP server|client: the words that start that end of SETUP, in $pre.
side() {
  local setup=$1 end=$2
  pre=()
  case $setup/$end in
    ferry/*|client/client|server/server) pre=(env FERRY_STATS=1 "FERRY_LOG_FILE=$logs/$tag.$end.%p.log" "$build/ferry") ;;
    nodev/*) pre=(env FERRY_DEVICES=none FERRY_STATS=1 "FERRY_LOG_FILE=$logs/$tag.$end.%p.log" "$build/ferry") ;;
  esac
}

wait_listen() {
  for _ in $(seq 100); do ss -Hltn "sport = :$1" | grep -q LISTEN && return 0; sleep 0.1; done
  return 1
}

stop() {  # stop PID [SIGNAL]
  kill -"${2:-TERM}" "$1" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

note() { echo "$3" >> "$res/$1.$2"; }  # note METRIC SETUP VALUE

median() { sort -g | awk 'NF {v[++n]=$1} END {if (!n) print "-"; else print (n % 2) ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2}'; }

# redis and pgbench: every setup's server up at once, then short bursts of requests,
# the setups taking turns; each setup's figure for the run is the median of its bursts.
# Run one after the other, whole runs of redis-benchmark met a host that had drifted
# (per-run ratios from 0.67 to 1.04 in one benchmark); bursts side by side meet the
# same host.
bursts=5
burst() { echo "$3" >> "$res/bursts.$1.$2"; }  # burst METRIC SETUP VALUE
turns() {  # turns SETUPS FN ARGS...: FN SETUP BURST ARGS... for each burst, setups in turn
  local b s
  for b in $(seq $bursts); do
    for s in $(order "$1" $((r + b))); do "$2" "$s" "$b" "${@:3}"; done
  done
}
noted_bursts() {  # noted_bursts METRIC: each setup's median burst, noted for the run
  local f
  for f in "$res/bursts.$1".*; do
    [ -s "$f" ] && note "$1" "${f##*.}" "$(median < "$f")"
    rm -f "$f"
  done
}
redis_burst() {  # redis_burst SETUP BURST (the server's port in at[SETUP])
  tag=redis.$1.$r.$2
  side "$1" client
  timeout -k 5 $limit "${pre[@]}" redis-benchmark -h "$ip" -p ${at[$1]} -c 10 -n $((redis_n / bursts)) \
    -t set,get --csv > "$logs/$tag.out" 2>&1
  burst redis_set_rps "$1" "$(awk -F'"' '$2 == "SET" {print $4}' "$logs/$tag.out")"
  burst redis_get_rps "$1" "$(awk -F'"' '$2 == "GET" {print $4}' "$logs/$tag.out")"
}
redis() {
  local s server servers=()
  declare -A at
  for s in $setups; do
    port=$((port + 1)); at[$s]=$port; tag=redis.$s.$r
    side "$s" server
    "${pre[@]}" redis-server --port $port --bind "$ip" --protected-mode no --save '' --appendonly no \
      > "$logs/$tag.server.out" 2>&1 &
    servers+=($!)
    wait_listen $port
  done
  turns "$setups" redis_burst
  for server in "${servers[@]}"; do stop $server; done
  noted_bursts redis_set_rps
  noted_bursts redis_get_rps
}

iperf() {
  local setup=$1 server
  port=$((port + 1)); tag=iperf3.$setup.$r
  side "$setup" server
  "${pre[@]}" iperf3 -s -1 -B "$ip" -p $port > "$logs/$tag.server.out" 2>&1 &
  server=$!
  wait_listen $port || { stop $server; return; }
  side "$setup" client
  timeout -k 5 $limit "${pre[@]}" iperf3 -c "$ip" -p $port -t "$secs" -f g > "$logs/$tag.out" 2>&1
  stop $server
  note iperf3_gbps "$setup" "$(awk '/receiver/ {print $(NF-2)}' "$logs/$tag.out")"
}

# What a short-lived connection pays at each end (connect_rate: connect, a byte each
# way, close, again).
connects() {
  local setup=$1 server
  port=$((port + 1)); tag=connect.$setup.$r
  side "$setup" server
  "${pre[@]}" "$build/connect_rate" server "$ip" $port > "$logs/$tag.server.out" 2>&1 &
  server=$!
  wait_listen $port || { stop $server; return; }
  side "$setup" client
  timeout -k 5 $limit "${pre[@]}" "$build/connect_rate" client "$ip" $port "$secs" > "$logs/$tag.out" 2>&1
  stop $server
  note connect_rate "$setup" "$(awk '/connections\/s/ {print $2}' "$logs/$tag.out")"
}

# What a forking server pays per connection in its parent and child (fork_rate: a
# listener on $ip and a connection from a client of the setup's client end open, fork,
# the child closes the listener and exit()s). The client is another program (bash,
# holding the connection), as a server's clients are: a process under ferry connected
# to itself would be both ends under ferry, and upgrade in the test bed. No counters
# at the server: a file of them per child would be the cost measured.
forks() {
  local setup=$1
  [ "$setup" = client ] && return  # its server end is plain
  tag=fork.$setup.$r
  side "$setup" server
  pre=("${pre[@]/#FERRY_STATS=1/FERRY_STATS=0}")
  fork_run "${pre[@]}"
  note fork_rate "$setup" "$(awk '/^forks\/s:/ {print $2}' "$logs/$tag.out")"
  if [ "$setup" = plain ]; then  # the floors, beside plain: a preloaded library that does nothing,
    tag=fork.empty.$r
    fork_run env LD_PRELOAD="$build/libempty_preload.so"
    note fork_rate_floor empty "$(awk '/^forks\/s:/ {print $2}' "$logs/$tag.out")"
    # one that allocates once as it loads (fork_rate has no heap of its own: this makes one),
    tag=fork.alloc.$r
    fork_run env LD_PRELOAD="$build/liballoc_preload.so"
    note fork_rate_floor alloc "$(awk '/^forks\/s:/ {print $2}' "$logs/$tag.out")"
    # ferry itself with nothing started (FERRY_ENABLE=0: what loading the library costs),
    tag=fork.ferry_off.$r
    fork_run env LD_PRELOAD="$build/libferry.so" FERRY_ENABLE=0 FERRY_STATS=0
    note fork_rate_floor ferry_off "$(awk '/^forks\/s:/ {print $2}' "$logs/$tag.out")"
    [ "$where" = vm ] || return 0
    # and, in the test bed, one that only listens on rdma_cm (what any RDMA server holds)
    tag=fork.rdma_cm.$r
    fork_run env LD_PRELOAD="$build/librdma_cm_preload.so" RDMA_CM_PRELOAD_IP="$ip"
    note fork_rate_floor rdma_cm "$(awk '/^forks\/s:/ {print $2}' "$logs/$tag.out")"
  fi
}
fork_run() {  # fork_run WORDS...: fork_rate under WORDS, its client from $setup's client end
  local server client
  port=$((port + 1))
  timeout -k 5 $limit "$@" "$build/fork_rate" "$secs" "$ip" $port > "$logs/$tag.out" 2>&1 &
  server=$!
  wait_listen $port || { stop $server; return; }
  side "$setup" client
  "${pre[@]}" bash -c 'exec 3<>"/dev/tcp/$0/$1" && exec sleep "$2"' "$ip" $port $((limit + 5)) \
    > "$logs/$tag.client.out" 2>&1 &
  client=$!
  wait $server || true
  stop $client
}

# Throwaway copies of the template cluster, one per setup, owned by nobody (PostgreSQL
# refuses root).
pg=$(mktemp -d)
chmod 755 "$pg"
for s in $pg_setups; do cp -a "$template/data" "$pg/$s"; done
chown -R nobody "$pg"

pg_start() {  # pg_start SETUP [stats|nostats]: the postmaster's pid in $pgpid
  side "$1" server
  [ "${2:-}" = nostats ] && pre=("${pre[@]/#FERRY_STATS=1/FERRY_STATS=0}")
  "${as_nobody[@]}" "${pre[@]}" "$pg_bin/postgres" -D "$pg/$1" -p $port -k "$pg" -c "listen_addresses=$ip" \
    -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=30 \
    -c shared_buffers=32MB -c dynamic_shared_memory_type=mmap > "$logs/$tag.server.out" 2>&1 &
  pgpid=$!
  wait_listen $port
  # Listening is not ready: a postmaster refuses connections until its start-up process
  # is done, which in the test bed can take tens of seconds with every setup's starting.
  for _ in $(seq 300); do "$pg_bin/pg_isready" -q -h "$ip" -p $port && return 0; sleep 0.2; done
}

pgbench_burst() {  # pgbench_burst SETUP BURST METRIC PGBENCH_ARGS...
  local setup=$1 b=$2 metric=$3
  shift 3
  tag=$metric.$setup.$r.$b
  side "$setup" client
  timeout -k 5 $limit "${pre[@]}" "$pg_bin/pgbench" -h "$ip" -p ${at[$setup]} -U postgres -n \
    -T $(((secs + bursts - 1) / bursts)) "$@" postgres > "$logs/$tag.out" 2>&1
  burst "$metric" "$setup" "$(awk '/^tps = / {print $3}' "$logs/$tag.out")"
}
# SERVER_STATS nostats: the backends print no counters. With a connection per
# transaction a file of them per backend would be part of the cost measured (as for
# fork_rate); the clients' counters say whether a connection upgraded.
pgbench() {  # pgbench METRIC SERVER_STATS(stats|nostats) PGBENCH_ARGS...: in bursts, as redis
  local metric=$1 stats=$2 s pid pids=()
  shift 2
  declare -A at
  for s in $pg_setups; do
    port=$((port + 1)); at[$s]=$port; tag=$metric.$s.$r
    pg_start "$s" $stats
    pids+=($pgpid)
  done
  turns "$pg_setups" pgbench_burst "$metric" "$@"
  for pid in "${pids[@]}"; do stop $pid INT; done
  noted_bursts "$metric"
}

"$build/ferry" true  # warm the page cache
order() {  # order SETUPS [N]: forward when N (default: the run) is odd, else reversed
  if [ $((${2:-$r} % 2)) -eq 1 ]; then echo "$1"; else echo "$1" | tr ' ' '\n' | tac | tr '\n' ' '; fi
}
for r in $(seq "$runs"); do
  echo "bench-passthrough: $where run $r of $runs" >&2
  if [[ " $workloads " = *" redis "* ]]; then for s in $(order "$setups"); do redis "$s"; done; fi
  if [[ " $workloads " = *" iperf3 "* ]]; then for s in $(order "$setups"); do iperf "$s"; done; fi
  if [[ " $workloads " = *" connect "* ]]; then for s in $(order "$setups"); do connects "$s"; done; fi
  if [[ " $workloads " = *" fork "* ]]; then for s in $(order "$pg_setups"); do forks "$s"; done; fi
  if [[ " $workloads " = *" pgbench "* ]]; then
    pgbench pgbench_S_tps stats -S -c 4 -j 2
    pgbench pgbench_SC_tps nostats -S -C -c 2 -j 2
  fi
done
rm -rf "$pg"

all=$(echo "$pg_setups" | wc -w)
printf '\n%s: medians of %d runs of %ds; ratios: the median of the runs'"'"' setup/plain\n' "$where" "$runs" "$secs"
printf '%-16s' metric
for s in $pg_setups; do printf ' %10s' "$s"; done
for s in $pg_setups; do [ "$s" != plain ] && printf ' %10s' "$s/plain"; done
echo
for m in redis_set_rps redis_get_rps iperf3_gbps connect_rate pgbench_S_tps pgbench_SC_tps fork_rate; do
  [ -s "$res/$m.plain" ] || continue  # a workload not asked for
  printf '%-16s' "$m"
  base=$(median < "$res/$m.plain")
  for s in $pg_setups; do
    v=$( [ -s "$res/$m.$s" ] && median < "$res/$m.$s" || echo -)
    printf ' %10s' "$v"
  done
  for s in $pg_setups; do
    [ "$s" = plain ] && continue
    # Run r's ratio pairs the two setups' r-th runs, made minutes apart at most: the
    # host's drift over the whole benchmark (a third, some days) cancels out.
    v=$( [ -s "$res/$m.$s" ] && paste "$res/$m.plain" "$res/$m.$s" |
      awk '$1 + 0 > 0 && $2 != "" {print $2 / $1}' | median || echo -)
    awk -v v="$v" 'BEGIN {if (v != "-") printf " %10.3f", v; else printf " %10s", "-"}'
  done
  echo
done
# floor KIND WHAT: fork_rate under that preloaded library, and its ratio to plain.
floor() {
  [ -s "$res/fork_rate_floor.$1" ] || return 0
  local f ratio
  f=$(median < "$res/fork_rate_floor.$1")
  ratio=$(paste "$res/fork_rate.plain" "$res/fork_rate_floor.$1" | awk '$1 + 0 > 0 {print $2 / $1}' | median)
  printf 'fork_rate under %s: %s, %.3f of plain\n' "$2" "$f" "$ratio"
}
floor empty "an empty preloaded library (the floor for any LD_PRELOAD)"
floor alloc "a preloaded library that allocates once (the floor for any with state)"
floor ferry_off "ferry with FERRY_ENABLE=0 (the library loaded, nothing started)"
floor rdma_cm "a preloaded library that only listens on rdma_cm (the floor for any RDMA server)"
# Every connection above must have stayed on TCP: ferry's counters say so.
echo
echo "ferry's counters over all runs (clients and servers): upgraded, and why connections stayed on TCP"
cat "$logs"/*.log "$logs"/*.server.out 2>/dev/null | grep -oE '\b(upgrades_started|upgraded|tcp_[a-z_]+|requests_unmatched)[ =:]+[0-9]+' |
  sed -E 's/[ =:]+/ /' | awk '{s[$1] += $2} END {for (k in s) printf "  %s %d\n", k, s[k]}' | sort
rm -rf "$res"
