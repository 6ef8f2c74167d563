#!/usr/bin/env python3
"""Multi-process echo servers and their checking client (blocking sockets).

    fork_echo.py server IP PORT            socketserver.ForkingTCPServer
    fork_echo.py forkaccept IP PORT        accept, fork, the child serves, the parent closes
    fork_echo.py prefork IP PORT WORKERS   listen, fork WORKERS that each accept and serve
    fork_echo.py passfd IP PORT WORKERS    listen, fork WORKERS; accept and pass each
                                           connection to a worker (SCM_RIGHTS), unused
    fork_echo.py reuseport IP PORT         one of several unrelated processes, each
                                           with its own SO_REUSEPORT listener
    fork_echo.py client IP PORT CONNECTIONS [BYTES]

Every server serves each connection in a process other than the one whose rdma_cm
listener receives its upgrade request (reuseport: the first process to listen).
The client runs CONNECTIONS at once, each making a first small round trip, then
sending BYTES of random bytes (about 100 kB by default) while reading the echo; it
exits 1 unless every echo is identical. Between the two it waits for the upgrades
the round trips started: with ECHO_FERRY set (the path of the ferry launcher), until
`ferry stat` of this process counts as many connections upgraded as have made their
round trip (60 s at most: on a slow host a handshake can take seconds, and a bulk
sent before it ends goes over TCP); otherwise 0.5 s.
"""
import hashlib
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time


def upgraded(ferry):
    """This process's `upgraded` counter, as `ferry stat` reads it (0 when it cannot)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    try:
        out = subprocess.run([ferry, "stat", str(os.getpid())], env=env, capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] == "upgraded":
            return int(f[1])
    return 0


class Settle:
    """Between a connection's first round trip and its bulk: with ECHO_FERRY, waits
    until this process counts as many upgrades as connections have made their round
    trip (60 s at most, then says so on stderr); otherwise 0.5 s. Each connection waits
    on its own: a server may serve only some at a time (prefork's workers)."""

    def __init__(self):
        self.ferry = os.environ.get("ECHO_FERRY")
        self.lock = threading.Lock()
        self.trips = 0
        self.seen = 0
        self.looked = 0.0

    def wait(self):
        if not self.ferry:
            time.sleep(0.5)
            return
        with self.lock:
            self.trips += 1
            want = self.trips
        deadline = time.monotonic() + 60
        while True:
            with self.lock:  # one look at the counters per 0.1 s, whoever asks
                if time.monotonic() - self.looked >= 0.1:
                    self.seen = upgraded(self.ferry)
                    self.looked = time.monotonic()
                got = self.seen
            if got >= want:
                return
            if time.monotonic() > deadline:
                print(f"only {got} of {want} connections upgraded after 60 s", file=sys.stderr)
                return
            time.sleep(0.1)


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


def client(ip, port, n, size):
    errors = []
    settle = Settle()

    def one(i):
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
            settle.wait()
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

    def guarded(i):
        try:
            one(i)
        except OSError as e:  # a connection that failed is an error, not a pass
            print(f"connection {i}: {e}", file=sys.stderr)
            errors.append(i)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
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
        sys.exit(client(ip, port, int(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else 100000))
