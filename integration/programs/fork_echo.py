#!/usr/bin/env python3
"""Multi-process echo servers and their checking client (blocking sockets).

    fork_echo.py server IP PORT            socketserver.ForkingTCPServer
    fork_echo.py forkaccept IP PORT        accept, fork, the child serves, the parent closes
    fork_echo.py prefork IP PORT WORKERS   listen, fork WORKERS that each accept and serve
    fork_echo.py passfd IP PORT WORKERS    listen, fork WORKERS; accept and pass each
                                           connection to a worker (SCM_RIGHTS), unused
    fork_echo.py reuseport IP PORT         one of several unrelated processes, each
                                           with its own SO_REUSEPORT listener
    fork_echo.py client IP PORT CONNECTIONS [BYTES [WAVE]]

Every server serves each connection in a process other than the one whose rdma_cm
listener receives its upgrade request (reuseport: the first process to listen).
The client runs its CONNECTIONS in waves of WAVE at once (all of them by default; a
server that serves only some at a time, as prefork's workers do, needs waves no
larger), each connection making a first small round trip, then sending BYTES of
random bytes (about 100 kB by default) while reading the echo; it exits 1 unless every
echo is identical. Between the two, with ECHO_FERRY set (the path of the ferry
launcher), the wave's connections wait until `ferry stat` of this process counts every
connection of this wave and the earlier ones upgraded: every bulk byte goes after its
own connection's upgrade, on any machine. A wave whose upgrades do not all come
(integration/programs/upgrades.py's limit, for hangs) is an error, said in one line.
"""
import hashlib
import os
import signal
import socket
import socketserver
import sys
import threading

import upgrades


class Settle:
    """Between a connection's first round trip and its bulk: with ECHO_FERRY, waits
    until this process counts `want` connections upgraded (every connection of this
    wave and of the earlier ones), one look at the counters per 0.1 s whoever asks;
    False (said once on stderr, and at once from then on) if they never do. Without ECHO_FERRY: at once."""

    def __init__(self):
        self.ferry = os.environ.get("ECHO_FERRY")
        self.lock = threading.Lock()
        self.seen = 0
        self.gave_up = False

    def wait(self, want):
        if not self.ferry:
            return True
        with self.lock:  # the first to ask waits; the others find the count at once
            if self.seen < want and not self.gave_up:
                self.seen = upgrades.await_upgraded(self.ferry, want)
                if self.seen < want:
                    self.gave_up = True
                    print(f"only {self.seen} of {want} connections upgraded after {upgrades.LIMIT:.0f} s",
                          file=sys.stderr)
            return self.seen >= want


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


def echo(conn):
    while True:
        data = conn.recv(65536)
        if not data:
            break
        conn.sendall(data)
    conn.close()


def listener(ip, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port))
    s.listen(64)
    return s


def reap(*_):
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def fork_after_accept(ip, port):
    s = listener(ip, port)
    signal.signal(signal.SIGCHLD, reap)
    while True:
        try:
            conn, _ = s.accept()
        except InterruptedError:
            continue
        if os.fork() == 0:
            s.close()
            echo(conn)
            os._exit(0)
        conn.close()


def stop_workers_on_term(pids):
    """On SIGTERM, the workers are stopped and waited for, then this process exits."""

    def stop(*_):
        for p in pids:
            os.kill(p, signal.SIGTERM)
        for p in pids:
            os.waitpid(p, 0)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)


def prefork(ip, port, workers):
    s = listener(ip, port)
    pids = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            while True:
                conn, _ = s.accept()
                echo(conn)
        pids.append(pid)

    stop_workers_on_term(pids)
    while True:
        signal.pause()


def reuseport(ip, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((ip, port))
    s.listen(64)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        conn, _ = s.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()


def passfd(ip, port, workers):
    s = listener(ip, port)
    pids, ends = [], []
    for _ in range(workers):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            s.close()
            mine.close()
            signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
            while True:
                _, fds, _, _ = socket.recv_fds(theirs, 1, 1)
                if not fds:
                    os._exit(0)
                conn = socket.socket(fileno=fds[0])
                threading.Thread(target=echo, args=(conn,), daemon=True).start()
        theirs.close()
        pids.append(pid)
        ends.append(mine)

    stop_workers_on_term(pids)
    n = 0
    while True:
        conn, _ = s.accept()
        socket.send_fds(ends[n % workers], [b"c"], [conn.fileno()])
        conn.close()
        n += 1


def client(ip, port, n, size, wave):
    errors = []
    settle = Settle()

    def one(i, want):
        data = os.urandom(size + i * 7919)
        with socket.create_connection((ip, port)) as c:
            first = b"hello %d\n" % i
            c.sendall(first)
            got = b""
            while len(got) < len(first):
                chunk = c.recv(64)
                if not chunk:
                    break
                got += chunk
            if got != first:
                errors.append(i)
                return
            if not settle.wait(want):
                errors.append(i)
                return
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

    def guarded(i, want):
        try:
            one(i, want)
        except OSError as e:  # a connection that failed is an error, not a pass
            print(f"connection {i}: {e}", file=sys.stderr)
            errors.append(i)

    for first in range(0, n, wave):
        last = min(n, first + wave)
        threads = [threading.Thread(target=guarded, args=(i, last)) for i in range(first, last)]
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
    elif role == "forkaccept":
        fork_after_accept(ip, port)
    elif role == "prefork":
        prefork(ip, port, int(sys.argv[4]))
    elif role == "passfd":
        passfd(ip, port, int(sys.argv[4]))
    elif role == "reuseport":
        reuseport(ip, port)
    elif role != "client":
        sys.exit(__doc__)
    else:
        n = int(sys.argv[4])
        sys.exit(client(ip, port, n, int(sys.argv[5]) if len(sys.argv) > 5 else 100000,
                        int(sys.argv[6]) if len(sys.argv) > 6 else n))
