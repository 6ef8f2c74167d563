#!/usr/bin/env bash
# iperf3 -P 4 and -R, plainly and with both ends under ferry: same success, full transfer.
. "$(dirname "$0")/lib.sh"

for mode in plain ferry; do
  for args in "-P 4" "-R"; do
    port=$(free_port)
    tag=$mode-${args// /}
    bg "$mode" "server$tag" iperf3 -s -1 -p "$port"
    server=$last_pid
    wait_listening "$port"
    run "$mode" "client$tag" iperf3 -c 127.0.0.1 -p "$port" -t 2 $args -J > "$work/client$tag.json" \
      || fail "$tag: iperf3 client failed: $(head -c 2000 "$work/client$tag.json")"
    wait "$server" || fail "$tag: iperf3 server failed: $(cat "$work/server$tag.out")"
    bytes=$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(int(d["end"]["sum_received"]["bytes"]))' "$work/client$tag.json")
    [ "$bytes" -gt 1000000 ] || fail "$tag: only $bytes bytes received"
    echo "$tag: $bytes bytes"
    if [ "$mode" = ferry ]; then
      expect_tcp_bytes "client$tag"
      expect_tcp_bytes "server$tag"
    fi
  done
done
echo PASS
