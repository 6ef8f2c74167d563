#!/usr/bin/env bash
# Instructions per hot-path call, counted by callgrind (user space only: the kernel's
# share of a system call is not counted). Runs tests/hot_paths N times per mode:
#   plain libc, ferry passthrough (loopback: never upgraded) and, inside the test bed,
#   ferry over an RDMA ring (both ends of the connection upgraded).
#   instructions.sh BUILD_DIR [ITERATIONS]
set -uo pipefail
build=$1
n=${2:-2000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

count() {  # count IP MODE [LD_PRELOAD [upgraded]]: instructions per call, or "failed"
  local out=$work/cg.$RANDOM log=$work/log vars=()
  [ -n "${3:-}" ] && vars+=("LD_PRELOAD=$3")
  [ -n "${4:-}" ] && vars+=("SEMANTICS_STAT_CMD=$build/ferry stat")
  if env "${vars[@]}" \
      valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out" \
      "$build/hot_paths" "$1" "$2" "$n" > "$log" 2>&1; then
    awk -v n="$n" '/Collected :/ {printf "%.0f", $NF / n}' "$log"
  else
    echo "failed($(grep -v '^==' "$log" | tail -1 | cut -c1-40))"
  fi
}

rows=("send 64 B + recv 64 B|send_recv" "epoll_wait, 4 ready sockets|epoll"
      "epoll_ctl MOD,MOD,DEL,ADD|epoll_ctl")
printf '\nInstructions per call (callgrind, user space only), %d calls each\n' "$n"
printf '%-30s %12s %18s %18s\n' "hot path" "plain libc" "ferry passthrough" "ferry RDMA ring"
for row in "${rows[@]}"; do
  label=${row%|*} mode=${row#*|}
  plain=$(count 127.0.0.1 "$mode")
  pass=$(count 127.0.0.1 "$mode" "$build/libferry.so")
  ring="-"
  [ -n "${TESTBED_IP:-}" ] && ring=$(count "$TESTBED_IP" "$mode" "$build/libferry.so" upgraded)
  printf '%-30s %12s %18s %18s\n' "$label" "$plain" "$pass" "$ring"
done
