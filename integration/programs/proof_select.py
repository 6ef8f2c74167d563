#!/usr/bin/env python3
"""A server that asks select() whether its connection is readable while its client has
nothing to say (iperf3's control connection, the client waiting for the server).

    proof_select.py server IP PORT [select|poll|epoll]
    proof_select.py client IP PORT

The client sends "hello", reads "hi", then waits for "go" before it sends "bye". The
server, between "hi" and "go", asks select() (or poll(), or a level-triggered epoll
set) about the connection with a 3 s limit and prints what it said; on kernel TCP nothing is readable, and a program told otherwise
would block in its read. Each side prints what it received; compare the lines of a run
on kernel TCP with those of a run under ferry.
"""
import select
import socket
import sys


def recv_exact(c, n):
    got = b""
    while len(got) < n:
        chunk = c.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return got


def readable(c, way):
    if way == "select":
        return bool(select.select([c], [], [], 3.0)[0])
    if way == "poll":
        p = select.poll()
        p.register(c, select.POLLIN)
        return bool(p.poll(3000))
    e = select.epoll()
    e.register(c, select.EPOLLIN)
    try:
        return bool(e.poll(3.0))
    finally:
        e.close()


def server(ip, port, way="select"):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port))
    s.listen(1)
    print("listening", file=sys.stderr, flush=True)
    c, _ = s.accept()
    print("server got", recv_exact(c, 5))
    c.sendall(b"hi")
    print(f"server {way}:", "readable" if readable(c, way) else "nothing to read")
    c.sendall(b"go")
    print("server got", recv_exact(c, 3))
    c.close()


def client(ip, port):
    c = socket.create_connection((ip, port))
    c.sendall(b"hello")
    print("client got", recv_exact(c, 2))
    print("client got", recv_exact(c, 2))
    c.sendall(b"bye")
    print("client end", recv_exact(c, 1))
    c.close()


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]), *sys.argv[4:])
