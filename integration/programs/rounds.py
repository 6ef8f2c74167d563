#!/usr/bin/env python3
"""Request/response rounds on one connection, the way a redis or memcached client and
an event-loop server exchange them: every request waits for its reply.

  rounds.py server IP PORT       epoll, non-blocking: echo each request; one connection
  rounds.py client IP PORT N     N rounds of a 16-byte request and its echo

The client prints "rounds: N". Plain sockets, so it runs unchanged with and without
ferry."""
import select
import socket
import sys


def server(ip, port):
    ls = socket.create_server((ip, port))
    print("listening", flush=True)
    c, _ = ls.accept()
    c.setblocking(False)
    ep = select.epoll()
    ep.register(c.fileno(), select.EPOLLIN)
    while True:
        ep.poll()
        try:
            data = c.recv(65536)
        except BlockingIOError:
            continue
        if not data:
            return
        c.sendall(data)


def client(ip, port, n):
    c = socket.create_connection((ip, port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(n):
        req = b"%016d" % i
        c.sendall(req)
        got = b""
        while len(got) < len(req):
            part = c.recv(len(req) - len(got))
            if not part:
                sys.exit("rounds: the server closed early")
            got += part
        if got != req:
            sys.exit("rounds: round %d came back as %r" % (i, got))
    c.close()
    print("rounds: %d" % n)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]))
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
