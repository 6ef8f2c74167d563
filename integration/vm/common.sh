# Sourced by the test bed's scenario scripts, which define fail() with failed_with:
# their failures, counted, and repeated at the end (so that a log shown only by its
# head and tail still tells what failed), and what they wait on.
failures=0
failed=()

# failed_with LINE: one failure, said now and again by verdict.
failed_with() {
  printf '%s\n' "$1"
  failed+=("$1")
  failures=$((failures + 1))
}

# verdict WHAT: the closing lines; the status is 0 when nothing failed.
verdict() {
  if [ "$failures" -eq 0 ]; then
    printf '%s: all passed\n' "$1"
    return 0
  fi
  printf '%s: %d failure(s):\n' "$1" "$failures"
  printf '  %.300s\n' "${failed[@]}"
  return 1
}

# wait_port PORT: until something listens on it (10 s at most).
wait_port() {
  for _ in $(seq 100); do ss -Hltn "sport = :$1" | grep -q LISTEN && return 0; sleep 0.1; done
  fail "nothing listens on port $1"
}

# bounded SECONDS PATTERN CMD...: runs CMD, for SECONDS at most. Past that, the stacks
# of every thread of every process whose command line matches PATTERN (both ends of a
# hung exchange) go to $out/hang.PATTERN.txt, CMD is killed, and the status is 124:
# a hang fails one check with its evidence instead of the whole test bed's time.
bounded() {
  local secs=$1 pattern=$2 pid tenths=0 p
  shift 2
  "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$tenths" -ge $((secs * 10)) ]; then
      for p in $(pgrep -f -- "$pattern"); do
        echo "== $p: $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)"
        [ -z "${ferry:-}" ] || "$ferry" stat "$p" 2>&1 | grep -vE ' 0 +#' | head -40
        timeout 60 gdb -p "$p" -batch -ex 'thread apply all bt' 2>&1 | grep -E '^(#|Thread)'
      done > "$out/hang.${pattern//[^a-zA-Z0-9_-]/_}.txt" 2>&1
      kill -9 "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 0.1
    tenths=$((tenths + 1))
  done
  wait "$pid"
}

# window_rdma PROGRAM N: once the counters of the newest process named PROGRAM (or of
# process PROGRAM, a pid) show N connections upgraded they are read (to
# $out/$name.PROGRAM-upgraded.stat), and again 3 s later: of what its connections
# carried between the two readings, at least 99% went over RDMA. No figure depends on
# how fast the upgrades were (120 s is a limit for hangs). The program keeps running;
# the status is 1 when the window failed (said by fail).
window_rdma() {
  local prog=$1 n=$2 pid="" up=0 r t
  for _ in $(seq 1200); do
    { [[ $prog =~ ^[0-9]+$ ]] && pid=$prog || pid=$(pgrep -n -x "$prog"); } &&
      up=$("$ferry" stat "$pid" 2>/dev/null | awk '$1 == "upgraded" {print $2}') && [ "${up:-0}" -ge "$n" ] && break
    sleep 0.1
  done
  [ "${up:-0}" -ge "$n" ] || { fail "$prog: only ${up:-0} of its $n connections upgraded after 120 s"; return 1; }
  "$ferry" stat "$pid" > "$out/$name.$prog-upgraded.stat" 2>/dev/null
  sleep 3
  "$ferry" stat "$pid" > "$out/$name.$prog-later.stat" 2>/dev/null || { fail "$prog ended before its window was measured"; return 1; }
  # grew FIELD: how much FIELD grew between the two readings.
  grew() { awk -v f="$1" '$1 == f {v[FILENAME] = $2} END {print v[ARGV[2]] - v[ARGV[1]]}' \
    "$out/$name.$prog-upgraded.stat" "$out/$name.$prog-later.stat"; }
  r=$(( $(grew bytes_rdma_sent) + $(grew bytes_rdma_received) ))
  t=$(( $(grew bytes_tcp_sent) + $(grew bytes_tcp_received) ))
  [ $((r * 100)) -ge $(( (r + t) * 99 )) ] && [ "$r" -gt 0 ] ||
    { fail "$prog's 3 s once upgraded: only $r of $((r + t)) bytes went over RDMA (want 99%)"; return 1; }
}
