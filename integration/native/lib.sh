# Shared by the native real-program tests: each runs a third-party program plainly and
# under ferry (no RDMA anywhere), requires the same outcome, and reads ferry's own
# counters to prove the shim was loaded and saw the program's TCP bytes.
set -euo pipefail
# Job control: background programs keep SIGINT (non-interactive shells ignore it in
# their jobs), so Python servers can be stopped cleanly.
set -m

: "${BUILD_DIR:?BUILD_DIR must name the build directory holding ferry and libferry.so}"
FERRY=$BUILD_DIR/ferry
PY=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-native.XXXXXX")
pids=()

cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "${KEEP_WORK:-0}" = 1 ]; then echo "work dir kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_listening PORT: until something listens on 127.0.0.1:PORT (10 s at most).
wait_listening() {
  local i
  for i in $(seq 100); do
    ss -Hltn "sport = :$1" | grep -q LISTEN && return 0
    sleep 0.1
  done
  fail "nothing listens on port $1"
}

# command_for MODE NAME STATS CMD...: sets CMD to CMD... as MODE (plain or ferry) runs
# it. Under ferry, ferry's log goes to $work/NAME.<pid>.log, and with STATS=1 the
# counters too, at exit (a process killed by a signal never gets there).
command_for() {
  local mode=$1 name=$2 stats=$3
  shift 3
  if [ "$mode" = ferry ]; then
    CMD=(env FERRY_STATS="$stats" "FERRY_LOG_FILE=$work/$name.%p.log" "$FERRY" "$@")
  else
    CMD=("$@")
  fi
}

# run MODE NAME CMD...: in the foreground.
run() {
  command_for "$1" "$2" 1 "${@:3}"
  "${CMD[@]}"
}

# bg MODE NAME CMD...: a server in the background, output in $work/NAME.out; $last_pid
# is the program's own pid (env and ferry exec into it).
declare -A bg_names=()
bg() {
  command_for "$1" "$2" 1 "${@:3}"
  "${CMD[@]}" > "$work/$2.out" 2>&1 &
  last_pid=$!
  pids+=($last_pid)
  [ "$1" = ferry ] && bg_names[$last_pid]=$2
  return 0
}

# stop PID [SIGNAL]: reads a ferry server's live counters (ferry stat) into its log,
# then asks it to exit and waits.
stop() {
  local name=${bg_names[$1]:-}
  if [ -n "$name" ]; then
    "$FERRY" stat "$1" >> "$work/$name.$1.log" || fail "ferry stat $1 ($name) failed"
  fi
  kill -"${2:-TERM}" "$1" 2>/dev/null || true
  local i
  for i in $(seq 100); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$1" 2>/dev/null && echo "warning: pid $1 ignored SIG${2:-TERM}" >&2
  wait "$1" 2>/dev/null || true
}

# counter NAME FIELD: FIELD summed over every process of NAME that ran under ferry.
counter() {
  local files=("$work/$1".*.log)
  [ -e "${files[0]}" ] || fail "$1 left no ferry counters: was libferry.so loaded?"
  # One file per process; counters only grow, so a process's largest reading (its
  # exit dump or its last `ferry stat`) is its total.
  awk -v f="$2" '$1 == f && $2 > m[FILENAME] {m[FILENAME] = $2} END {for (k in m) s += m[k]; printf "%.0f\n", s}' "${files[@]}"
}

# expect_tcp_bytes NAME: ferry saw NAME's TCP bytes (all on kernel TCP, none on RDMA).
expect_tcp_bytes() {
  local sent recv rdma
  sent=$(counter "$1" bytes_tcp_sent)
  recv=$(counter "$1" bytes_tcp_received)
  rdma=$(( $(counter "$1" bytes_rdma_sent) + $(counter "$1" bytes_rdma_received) ))
  [ $((sent + recv)) -gt 0 ] || fail "$1: ferry counted no TCP bytes"
  if grep -hE ' (warn|error) ' "$work/$1".*.log; then fail "$1: ferry logged warnings"; fi
  [ "$rdma" -eq 0 ] || fail "$1: $rdma bytes on RDMA with no RDMA device"
  echo "$1 under ferry: $(counter "$1" tcp_sockets) TCP sockets, $sent bytes sent and $recv received on kernel TCP"
}
