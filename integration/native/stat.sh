#!/usr/bin/env bash
# ferry stat across processes: two programs under ferry, each with its own TCP
# sockets; `ferry stat` with no pid sums every process of the user, several pids sum
# theirs, one pid prints its own, and --watch prints what grew.
. "$(dirname "$0")/lib.sh"

sockets='import socket, sys, time
keep = []
for _ in range(int(sys.argv[1])):
    keep.append(socket.socket())
    time.sleep(float(sys.argv[2]))
time.sleep(60)'
bg ferry hold3 "$PY" -c "$sockets" 3 0
a=$last_pid
bg ferry grows "$PY" -c "$sockets" 40 0.2
b=$last_pid
# counter FIELD TEXT: FIELD's value in ferry stat's lines.
counter_of() { awk -v f="$1" '$1 == f {print $2}' <<< "$2"; }
for _ in $(seq 100); do
  [ "$(counter_of tcp_sockets "$("$FERRY" stat "$a" 2> /dev/null)")" = 3 ] && break
  sleep 0.1
done
one=$("$FERRY" stat "$a") || fail "ferry stat $a"
[ "$(counter_of tcp_sockets "$one")" = 3 ] || fail "ferry stat $a: tcp_sockets $(counter_of tcp_sockets "$one"), expected 3"
head -1 <<< "$one" | grep -qx "ferry\[$a\] counters:" || fail "ferry stat $a: header $(head -1 <<< "$one")"
both=$("$FERRY" stat "$a" "$b") || fail "ferry stat $a $b"
head -1 <<< "$both" | grep -qx "ferry: 2 processes, counters summed:" || fail "ferry stat $a $b: $(head -1 <<< "$both")"
[ "$(counter_of tcp_sockets "$both")" -gt 3 ] || fail "ferry stat $a $b: tcp_sockets $(counter_of tcp_sockets "$both")"
all=$("$FERRY" stat) || fail "ferry stat"
n=$(head -1 <<< "$all" | sed -n 's/^ferry: \([0-9]*\) process.*/\1/p')
[ "${n:-0}" -ge 2 ] || fail "ferry stat with no pid found ${n:-0} processes: $(head -1 <<< "$all")"
[ "$(counter_of tcp_sockets "$all")" -ge "$(counter_of tcp_sockets "$both")" ] ||
  fail "ferry stat with no pid: tcp_sockets $(counter_of tcp_sockets "$all") below the two's"
# --watch: the growing one opens a socket every 0.2 s; the steady one's lines stay out.
timeout 3.5 "$FERRY" stat --watch 1 "$b" > "$work/watch.out" || [ $? = 124 ] || fail "ferry stat --watch"
grep -q '^..:..:..: the last 1s, 1 process:$' "$work/watch.out" || fail "ferry stat --watch: $(head -2 "$work/watch.out")"
grep -q '^ *tcp_sockets  *[1-9]' "$work/watch.out" || fail "ferry stat --watch shows no growth: $(cat "$work/watch.out")"
! grep -q '^ *listeners ' "$work/watch.out" || fail "ferry stat --watch printed a counter that did not grow"
"$FERRY" stat --watch 0 2> /dev/null && fail "ferry stat --watch 0 was taken"
"$FERRY" stat 999999999 2> /dev/null && fail "ferry stat of no process succeeded"
echo PASS
