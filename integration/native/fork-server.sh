#!/usr/bin/env bash
# A fork-per-connection echo server (Python's socketserver.ForkingTCPServer) with
# concurrent clients, plainly and both under ferry: every echo identical.
. "$(dirname "$0")/lib.sh"

fork_echo="$(cd "$(dirname "$0")/.." && pwd)/programs/fork_echo.py"
for mode in plain ferry; do
  port=$(free_port)
  bg "$mode" "server-$mode" "$PY" "$fork_echo" server 127.0.0.1 "$port"
  server=$last_pid
  wait_listening "$port"
  run "$mode" "client-$mode" "$PY" "$fork_echo" client 127.0.0.1 "$port" 16 || fail "$mode: echo mismatch"
  stop "$server" INT
done
# The parent accepted every connection; its forked children carried the bytes.
accepted=$(counter server-ferry connections_passive)
[ "$accepted" -eq 16 ] || fail "the server under ferry accepted $accepted connections, expected 16"
expect_tcp_bytes client-ferry
echo PASS
