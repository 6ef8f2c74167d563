#!/bin/sh
# Runs inside the test bed: the rxe device is ACTIVE, rping exchanges data over rdma_cm,
# and ib_write_lat -R measures RDMA WRITE latency. Fails on any deviation.
set -eu
ip=${TESTBED_IP:-198.18.0.1}
rdma link show | tee /dev/stderr | grep -q 'rxe0/1 state ACTIVE'
ibv_devinfo -d rxe0 | grep -q 'PORT_ACTIVE'

# Until a server's rdma_cm id listens (an emulated VM may take more than a second to
# start one): a client that comes first is rejected.
wait_listen() {
  for _ in $(seq 100); do
    rdma resource show cm_id 2>/dev/null | grep -q LISTEN && return 0
    sleep 0.1
  done
}

rping -s -a "$ip" -C 5 -S 64 > "$VM_OUT/rping-server.log" 2>&1 &
server=$!
wait_listen
rping -c -a "$ip" -C 5 -S 64 -v > "$VM_OUT/rping-client.log" 2>&1
wait $server
cat "$VM_OUT/rping-client.log"
test "$(grep -c 'ping data' "$VM_OUT/rping-client.log")" -eq 5

# perftest prints "inf" when its estimate of the clock rate went wrong (it measures the
# CPU against the clock at start, which a busy host skews): that run says nothing about
# RDMA, so it is repeated, up to three times.
# A client that failed outright (rejected: the server was not listening yet) is
# repeated the same way, its server stopped first.
for try in 1 2 3; do
  ib_write_lat -R -n 200 > "$VM_OUT/lat-server.log" 2>&1 &
  server=$!
  wait_listen
  ib_write_lat -R -n 200 "$ip" > "$VM_OUT/lat-client.log" 2>&1 || kill "$server" 2>/dev/null || true
  wait $server || true
  cat "$VM_OUT/lat-client.log"
  grep -Eq '^ *2 +200 +[0-9.]+' "$VM_OUT/lat-client.log" && break
done
grep -Eq '^ *2 +200 +[0-9.]+' "$VM_OUT/lat-client.log"
echo "rdma-basic: rxe0 ACTIVE, rping 5/5, ib_write_lat done"
