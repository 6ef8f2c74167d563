#!/usr/bin/env bash
# Inside the test bed: ferry as a user gets it. The Debian package (cpack, made in the
# build tree) is installed with dpkg on the guest, over writable layers on /usr, /etc
# and dpkg's state (the host's root stays read-only); then `ferry` from PATH runs
# iperf3 at both ends over RDMA, `ferry stat` reads a running process of the installed
# (stripped) library, and man finds both pages.
#   package.sh DEB
set -uo pipefail
deb=$1
ip=${TESTBED_IP:?run inside integration/testbed}
out=${VM_OUT:-/tmp}
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
source "$(dirname "$0")/common.sh"
fail() { failed_with "FAIL [package]: $*"; }

layers=/run/package-layers
mkdir -p $layers && mount -t tmpfs tmpfs $layers || fail "no tmpfs for the writable layers"
for d in usr etc var/lib/dpkg var/log var/cache; do
  u=$layers/$(echo $d | tr / _)
  mkdir -p "$u/upper" "$u/work"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$u/upper,workdir=$u/work" "/$d" || fail "no writable layer on /$d"
done
command -v ferry > /dev/null && fail "a ferry is on PATH before the package is installed: $(command -v ferry)"
# Without triggers: man-db's would index the host's every manual page, minutes under
# emulation; man finds ferry's pages without the index.
dpkg --no-triggers -i "$deb" > "$out/dpkg.out" 2>&1 || fail "dpkg -i: $(tail -3 "$out/dpkg.out")"
[ "$(command -v ferry)" = /usr/bin/ferry ] || fail "ferry on PATH is '$(command -v ferry)', not /usr/bin/ferry"
dpkg -L ferry > "$out/files.txt"
grep -qx /usr/lib/ferry/libferry.so "$out/files.txt" || fail "the package holds no /usr/lib/ferry/libferry.so"
for page in ferry.1 ferry.conf.5; do
  grep -qx "/usr/share/man/man${page##*.}/$page.gz" "$out/files.txt" || fail "the package holds no manual page $page"
done
MANPAGER=cat man ferry 2> /dev/null | grep -q FERRY_RING_SIZE || fail "man ferry does not show ferry(1)"
ferry --help > "$out/help.out" 2>&1 && grep -q FERRY_RING_SIZE "$out/help.out" || fail "ferry --help: $(head -2 "$out/help.out")"

# stats SIDE CMD... &: CMD with its counters in the log at exit; exec, so that $! is
# the program's own pid (ferry execs into it).
stats() { FERRY_STATS=1 FERRY_LOG_FILE="$out/iperf3.$1.%p.log" exec "${@:2}"; }
stats server ferry iperf3 -s -1 -B "$ip" -p 5301 > "$out/iperf3.server.out" 2>&1 &
server=$!
wait_port 5301
stats client ferry iperf3 -c "$ip" -p 5301 -t 3 > "$out/iperf3.client.out" 2>&1 &
client=$!
sleep 1.5
ferry stat "$server" > "$out/server.stat" 2>&1 && grep -q '^ *upgraded ' "$out/server.stat" ||
  fail "ferry stat of the running server: $(head -2 "$out/server.stat")"
wait $client || fail "iperf3 client: $(tail -3 "$out/iperf3.client.out")"
timeout 60 tail --pid=$server -f /dev/null || kill -9 $server
wait $server || fail "iperf3 server: $(tail -3 "$out/iperf3.server.out")"
# counter SIDE FIELD: that side's value at exit.
counter() { awk -v f="$2" '$1 == f {v = $2} END {print v + 0}' "$out"/iperf3."$1".*.log 2>/dev/null; }
for side in server client; do
  [ "$(counter $side upgraded)" -ge 1 ] || fail "the $side did not upgrade: upgraded=$(counter $side upgraded)"
done
rdma=$(( $(counter client bytes_rdma_sent) + $(counter server bytes_rdma_sent) ))
[ "$rdma" -ge 1000000 ] || fail "only $rdma bytes went over RDMA"
echo "installed: $(dpkg-query -W -f='${Package} ${Version}' ferry); iperf3 under /usr/bin/ferry:" \
  "upgraded $(counter server upgraded)/$(counter client upgraded), $rdma bytes over RDMA"
verdict package
