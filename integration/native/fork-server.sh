#!/usr/bin/env bash
# A fork-per-connection echo server (Python's socketserver.ForkingTCPServer) with
# concurrent clients, plainly and both under ferry: every echo identical.
. "$(dirname "$0")/lib.sh"

cat > "$work/server.py" <<'PY'
import socketserver, sys
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            data = self.request.recv(65536)
            if not data:
                break
            self.request.sendall(data)
class Server(socketserver.ForkingTCPServer):
    allow_reuse_address = True
with Server(("127.0.0.1", int(sys.argv[1])), Echo) as s:
    s.serve_forever()
PY
cat > "$work/client.py" <<'PY'
import hashlib, os, socket, sys, threading
port, n = int(sys.argv[1]), int(sys.argv[2])
errors = []
def one(i):
    data = os.urandom(100000 + i * 7919)
    with socket.create_connection(("127.0.0.1", port)) as c:
        t = threading.Thread(target=c.sendall, args=(data,))
        t.start()
        got = bytearray()
        while len(got) < len(data):
            chunk = c.recv(65536)
            if not chunk:
                break
            got += chunk
        t.join()
        c.shutdown(socket.SHUT_WR)
        if c.recv(1) != b"" or hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
            errors.append(i)
threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in threads: t.start()
for t in threads: t.join()
print("connections", n, "errors", len(errors))
sys.exit(1 if errors else 0)
PY
for mode in plain ferry; do
  port=$(free_port)
  bg "$mode" "server-$mode" "$PY" "$work/server.py" "$port"
  server=$last_pid
  wait_listening "$port"
  run "$mode" "client-$mode" "$PY" "$work/client.py" "$port" 16 || fail "$mode: echo mismatch"
  stop "$server" INT
done
# The parent accepted every connection; its forked children carried the bytes.
accepted=$(counter server-ferry connections_passive)
[ "$accepted" -eq 16 ] || fail "the server under ferry accepted $accepted connections, expected 16"
expect_tcp_bytes client-ferry
echo PASS
