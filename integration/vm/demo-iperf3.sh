#!/bin/sh
# Inside the test bed: iperf3 server and client, both under ferry, over 198.18.0.1
# (rxe0's address), then a table of where their bytes went from ferry's counters.
set -eu
build=$1
ip=${TESTBED_IP:-198.18.0.1}
out=$VM_OUT
ferry=$build/ferry

echo "RDMA device:"; rdma link show
FERRY_STATS=1 FERRY_LOG_FILE="$out/server.log" "$ferry" iperf3 -s -1 -B "$ip" -p 5201 > "$out/server.out" 2>&1 &
server=$!
i=0
until ss -Hltn 'sport = :5201' | grep -q LISTEN; do i=$((i + 1)); [ $i -lt 100 ] || exit 1; sleep 0.1; done
FERRY_STATS=1 FERRY_LOG_FILE="$out/client.log" "$ferry" iperf3 -c "$ip" -p 5201 -t 3 | tee "$out/client.out"
wait $server

value() { awk -v f="$2" '$1 == f {print $2}' "$out/$1.log" | tail -1; }
echo
echo "Where the bytes went (ferry counters):"
printf '%-8s %16s %16s %16s %16s\n' side tcp_sent tcp_received rdma_sent rdma_received
for side in client server; do
  printf '%-8s %16s %16s %16s %16s\n' "$side" "$(value $side bytes_tcp_sent)" "$(value $side bytes_tcp_received)" \
    "$(value $side bytes_rdma_sent)" "$(value $side bytes_rdma_received)"
done
tcp_in=$(nstat -az TcpExtTCPHPAcks TcpInSegs 2>/dev/null | awk '$1 == "TcpInSegs" {print $2}')
echo "kernel TCP segments received in the VM: ${tcp_in:-?}"
rdma_sent=$(value client bytes_rdma_sent)
if [ "${rdma_sent:-0}" -eq 0 ]; then
  echo "All bytes travelled on kernel TCP: this build of ferry has no RDMA transport yet."
fi
