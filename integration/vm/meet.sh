# shellcheck shell=bash
# Sourced by the two-host scripts (cross-host.sh, cross-programs.sh): how the two
# guests' commands meet in $TESTBED_SHARED.

# wait_for SECONDS FILE: whether FILE appeared within SECONDS.
wait_for() {
  local i
  for ((i = 0; i < $1 * 10; i++)); do
    [ -e "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
