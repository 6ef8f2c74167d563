#!/usr/bin/env python3
"""A connection handed to another program in the middle of its stream.

    handoff.py server IP PORT MODE    MODE: exec, pass, fork, forkwait or forkexec
    handoff.py client IP PORT TOTAL

The client writes TOTAL bytes (a seeded pseudo-random stream, so every run sends the
same bytes) while it reads the echo, then prints the count and sha256 of each and
exits 1 unless they are equal. With HANDOFF_FERRY set (the path of the ferry launcher),
the client sends its first CHUNK, then waits until `ferry stat` of itself counts the
connection upgraded, then the rest: the bytes before the hand-off cross RDMA however
slow the upgrade. The server's first process echoes exactly the first
HALF bytes (the client is still writing, so more are on their way), then hands the
connection on without reading further:
    exec: it execs this script as "carry FD", which echoes the rest;
    pass: it sends the descriptor over a Unix socket (SCM_RIGHTS) to a helper it
          started before accepting, closes its own copy and waits for the helper;
    fork: it forks; the child carries on, the parent closes its copy at once and
          waits for the child;
    forkwait: the same, but the parent keeps its copy open until the child is done;
    forkexec: the same, the child execing this script as "carry FD" (CGI style).
Whoever carries on echoes until the end of the stream, then closes.
A MODE of cutpass or cutexec waits, once HALF is echoed, until the file named by
$HANDOFF_GO exists (the test bed cuts the RDMA path meanwhile), then hands over as pass
or exec would.
"""
import hashlib
import os
import random
import socket
import subprocess
import sys
import threading
import time

import upgrades

HALF = 8 << 20
CHUNK = 65536


def echo(conn, limit=None):
    done = 0
    while limit is None or done < limit:
        want = CHUNK if limit is None else min(CHUNK, limit - done)
        data = conn.recv(want)
        if not data:
            break
        conn.sendall(data)
        done += len(data)
    return done


def carry(fd):
    conn = socket.socket(fileno=fd)
    n = echo(conn)
    conn.shutdown(socket.SHUT_WR)
    conn.close()
    print(f"carried {n} bytes", flush=True)


def helper(unix_fd):
    unix = socket.socket(fileno=unix_fd)
    _, fds, _, _ = socket.recv_fds(unix, 1, 1)
    carry(fds[0])


def server(ip, port, mode):
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((ip, port))
    lst.listen(4)
    cut = mode.startswith("cut")
    if cut:
        mode = mode[3:]
    if mode == "pass":
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        child = subprocess.Popen([sys.executable, __file__, "helper", str(theirs.fileno())],
                                 pass_fds=[theirs.fileno()])
        theirs.close()
    print("listening", flush=True)
    conn, _ = lst.accept()
    lst.close()
    n = echo(conn, HALF)
    print(f"echoed {n} bytes, handing over ({mode})", flush=True)
    while cut and not os.path.exists(os.environ["HANDOFF_GO"]):
        time.sleep(0.1)
    if mode == "exec":
        os.set_inheritable(conn.fileno(), True)
        os.execv(sys.executable, [sys.executable, __file__, "carry", str(conn.fileno())])
    if mode in ("fork", "forkwait", "forkexec"):
        pid = os.fork()
        if pid == 0 and mode == "forkexec":
            os.set_inheritable(conn.fileno(), True)
            os.execv(sys.executable, [sys.executable, __file__, "carry", str(conn.fileno())])
        if pid == 0:
            carry(conn.detach())
            os._exit(0)
        if mode == "fork":
            conn.close()
        _, status = os.waitpid(pid, 0)
        conn.close()
        sys.exit(os.waitstatus_to_exitcode(status))
    socket.send_fds(ours, [b"x"], [conn.fileno()])
    conn.close()
    sys.exit(child.wait())


def client(ip, port, total):
    conn = socket.create_connection((ip, port))
    sent = hashlib.sha256()

    ferry = os.environ.get("HANDOFF_FERRY")

    def write():
        rnd = random.Random(1234)
        left = total
        while left:
            data = rnd.randbytes(min(CHUNK, left))
            sent.update(data)
            conn.sendall(data)
            left -= len(data)
            if ferry and left + len(data) == total:  # after the first chunk
                got = upgrades.await_upgraded(ferry, 1)
                if got < 1:
                    print(f"the connection did not upgrade in {upgrades.LIMIT:.0f} s", file=sys.stderr, flush=True)
        conn.shutdown(socket.SHUT_WR)

    writer = threading.Thread(target=write)
    writer.start()
    got, echoed = 0, hashlib.sha256()
    while True:
        data = conn.recv(CHUNK)
        if not data:
            break
        echoed.update(data)
        got += len(data)
    writer.join()
    conn.close()
    same = got == total and echoed.digest() == sent.digest()
    print(f"sent {total} bytes sha256 {sent.hexdigest()[:16]}, echoed {got} bytes sha256 "
          f"{echoed.hexdigest()[:16]}: {'same' if same else 'DIFFERENT'}", flush=True)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "carry":
        carry(int(sys.argv[2]))
    elif role == "helper":
        helper(int(sys.argv[2]))
    elif role == "server":
        server(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
