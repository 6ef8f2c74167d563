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
