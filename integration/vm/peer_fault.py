#!/usr/bin/env python3
"""What a program sees when the other end of its connections dies, across two hosts.

    peer_fault.py kill-survivor IP PORT MEET   (host 1: serves, its peer is killed)
    peer_fault.py kill-victim IP PORT MEET     (host 2: connects, then is killed -9)
    peer_fault.py vanish-server IP PORT MEET   (host 1: serves, then its host vanishes)
    peer_fault.py vanish-survivor IP PORT MEET (host 2: connects, its peer host vanishes)

MEET is a path prefix in a directory both hosts share: each side leaves MEET.<step>
files there for the other (and for the scripts that kill the victim or the host).
Each program makes two connections, exchanges a few bytes on each (under ferry they
then upgrade: with FAULT_STAT_CMD set, the side waits until ferry's counters show
both upgraded), and then blocks in a call on each while the peer dies:

kill: the survivor blocks in recv on connection A (the victim read everything) and on
  connection B (the victim left 64 KiB unread): the kernel closes A with a FIN and B
  with a reset. Then A is written to three times, 0.3 s apart.
vanish: the survivor blocks in recv on connection R (keepalive: 2 s idle, 1 s apart,
  3 probes) and in sendall on connection S (TCP_USER_TIMEOUT 5 s); the server's whole
  host then stops, so nothing answers again. Then each is used once more.

The survivor prints one line per call: what it returned (an errno's name for an
error), never a timing, so that kernel TCP's lines and ferry's can be compared. A call
still blocked 120 s after the peer died prints HANG.
"""
import errno
import os
import socket
import subprocess
import sys
import threading
import time

PATIENCE = 120


def name_of(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e, OSError) else type(e).__name__


def touch(meet, step):
    with open(f"{meet}.{step}.tmp", "w") as f:
        f.write(f"{os.getpid()}\n")
    os.rename(f"{meet}.{step}.tmp", f"{meet}.{step}")


def wait_file(meet, step, seconds=300):
    end = time.time() + seconds
    while not os.path.exists(f"{meet}.{step}"):
        if time.time() > end:
            sys.exit(f"peer_fault: {meet}.{step} never appeared")
        time.sleep(0.05)


def wait_upgraded(n):
    """Under ferry (FAULT_STAT_CMD set): until this process's counters show n upgraded
    connections."""
    cmd = os.environ.get("FAULT_STAT_CMD")
    if not cmd:
        return
    end = time.time() + 30
    while time.time() < end:
        out = subprocess.run(cmd.split() + [str(os.getpid())], capture_output=True, text=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 2 and f[0] == "upgraded" and int(f[1]) >= n:
                return
        time.sleep(0.05)
    sys.exit(f"peer_fault: fewer than {n} connections upgraded")


def listen(ip, port):
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((ip, port))
    l.listen(4)
    return l


def accept_named(l, count):
    """Accepts `count` connections; each client names itself with its first byte, and
    gets one byte back."""
    conns = {}
    for _ in range(count):
        c, _ = l.accept()
        tag = c.recv(1).decode()
        c.sendall(b"k")
        conns[tag] = c
    return conns


def connect_named(ip, port, tag, setup=None):
    c = socket.socket()
    if setup:
        setup(c)
    c.connect((ip, port))
    c.sendall(tag.encode())
    if c.recv(1) != b"k":
        sys.exit("peer_fault: no answer from the server")
    return c


def call(what, fn, results):
    """Runs fn in a thread; results[what] becomes its outcome."""

    def run():
        try:
            r = fn()
            results[what] = str(len(r) if isinstance(r, bytes) else r)
        except Exception as e:  # the outcome is the point
            results[what] = "-1 " + name_of(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def once(what, fn):
    """Runs fn now and prints its outcome."""
    try:
        r = fn()
        print(f"{what}: {len(r) if isinstance(r, bytes) else r}", flush=True)
    except OSError as e:
        print(f"{what}: -1 {name_of(e)}", flush=True)


def report(order, threads, results):
    end = time.time() + PATIENCE
    for t in threads:
        t.join(max(0.0, end - time.time()))
    for what in order:
        print(f"{what}: {results.get(what, 'HANG')}", flush=True)
    return all(what in results for what in order)


def sendall_until_error(c):
    chunk = b"s" * 65536
    while True:
        c.sendall(chunk)


def kill_survivor(ip, port, meet):
    l = listen(ip, port)
    touch(meet, "listening")
    conns = accept_named(l, 2)
    wait_upgraded(2)
    a, b = conns["A"], conns["B"]
    b.sendall(b"u" * 65536)  # the victim never reads these
    wait_file(meet, "victim-ready")
    results = {}
    threads = [call("A recv", lambda: a.recv(1), results), call("B recv", lambda: b.recv(1), results)]
    time.sleep(0.5)
    touch(meet, "blocked")
    if not report(["A recv", "B recv"], threads, results):
        return 1
    once("B recv again", lambda: b.recv(1))
    for i in range(3):
        time.sleep(0.3)
        once(f"A send {i + 1}", lambda: a.send(b"x"))
    return 0


def kill_victim(ip, port, meet):
    wait_file(meet, "listening")
    conns = [connect_named(ip, port, "A"), connect_named(ip, port, "B")]
    wait_upgraded(2)
    touch(meet, "victim-ready")
    while conns:  # killed here, with B's bytes unread
        time.sleep(1)


def vanish_server(ip, port, meet):
    l = listen(ip, port)
    touch(meet, "listening")
    conns = accept_named(l, 2)
    wait_upgraded(2)
    touch(meet, "server-ready")
    while conns:  # the host vanishes under it; it never reads
        time.sleep(1)


def keepalive(c):
    c.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 2)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


def user_timeout(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 5000)


def vanish_survivor(ip, port, meet):
    wait_file(meet, "listening")
    r = connect_named(ip, port, "R", keepalive)
    s = connect_named(ip, port, "S", user_timeout)
    wait_upgraded(2)
    wait_file(meet, "server-ready")
    results = {}
    threads = [call("R recv", lambda: r.recv(1), results), call("S sendall", lambda: sendall_until_error(s), results)]
    time.sleep(0.5)
    touch(meet, "blocked")
    if not report(["R recv", "S sendall"], threads, results):
        return 1
    once("R recv again", lambda: r.recv(1))
    once("S send again", lambda: s.send(b"x"))
    return 0


def main(argv):
    roles = {"kill-survivor": kill_survivor, "kill-victim": kill_victim,
             "vanish-server": vanish_server, "vanish-survivor": vanish_survivor}
    if len(argv) != 5 or argv[1] not in roles:
        sys.exit(__doc__)
    return roles[argv[1]](argv[2], int(argv[3]), argv[4])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
