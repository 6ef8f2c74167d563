#!/usr/bin/env python3
"""A fork-per-connection echo server and its checking client (blocking sockets).

    fork_echo.py server IP PORT
    fork_echo.py client IP PORT CONNECTIONS

The server is socketserver.ForkingTCPServer: each connection is served by a forked
child. The client runs CONNECTIONS at once, each sending random bytes while reading
the echo, and exits 1 unless every echo is identical.
"""
import hashlib
import os
import socket
import socketserver
import sys
import threading


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            data = self.request.recv(65536)
            if not data:
                break
            self.request.sendall(data)


class Server(socketserver.ForkingTCPServer):
    allow_reuse_address = True
    # The client opens all its connections at once; socketserver's default backlog of
    # 5 overflows on a loaded machine and the kernel resets some (plainly too).
    request_queue_size = 64


def client(ip, port, n):
    errors = []

    def one(i):
        data = os.urandom(100000 + i * 7919)
        with socket.create_connection((ip, port)) as c:
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
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("connections", n, "errors", len(errors))
    return 1 if errors else 0


if __name__ == "__main__":
    role, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "server":
        with Server((ip, port), Echo) as s:
            s.serve_forever()
    else:
        sys.exit(client(ip, port, int(sys.argv[4])))
