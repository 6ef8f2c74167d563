#!/usr/bin/env python3
"""A server that asks select() whether its connection is readable while its client has
nothing to say (iperf3's control connection, the client waiting for the server).

    proof_select.py server IP PORT [select|poll|epoll|fionread]
    proof_select.py client IP PORT

The client sends "hello", reads "hi", then waits for "go" before it sends "bye". The
server, between "hi" and "go", asks select() (or poll(), or a level-triggered epoll
set, or ioctl(FIONREAD) every 10 ms) about the connection for 3 s and prints what it
said; on kernel TCP nothing is readable, and a program told otherwise
would block in its read. Each side prints what it received; compare the lines of a run
on kernel TCP with those of a run under ferry.
"""
import array
import fcntl
import select
import socket
import sys
import termios
import time


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
    if way == "fionread":
        until = time.monotonic() + 3.0
        while time.monotonic() < until:
            n = array.array("i", [0])
            fcntl.ioctl(c.fileno(), termios.FIONREAD, n)
            if n[0] > 0:
                return True
            time.sleep(0.01)
        return False
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
