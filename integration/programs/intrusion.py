#!/usr/bin/env python3
"""The two ends of a connection another user tries to read (integration/vm/attacks.sh).

  intrusion.py push-server IP PORT   accepts one client, reads its hello line, waits 1 s
                                     (time for an intruder's request), then sends 40
                                     SECRET-NN lines 0.2 s apart; reads the client's BYE.
  intrusion.py quiet-client IP PORT  connects, sends a hello line once the file named by
                                     $INTRUSION_GO exists (the intruder has asked), reads
                                     the 40 lines, sends BYE.
  intrusion.py pw-server IP PORT     accepts one client and prints everything it sends.
  intrusion.py pw-client IP PORT     sends 40 PASSWORD=NN lines 0.2 s apart, then closes.
  intrusion.py greet-server IP PORT  accepts one client, reads its line, answers with 40
                                     WELCOME-NN lines and ends the connection; under
                                     ferry ($INTRUSION_FERRY: the launcher), answers once
                                     `ferry stat` of itself counts the connection
                                     upgraded (30 s at most).
  intrusion.py push-all-server IP PORT N BYTES
                                     accepts N clients; to each, once it said its line
                                     (and, with $INTRUSION_FERRY, the ferry launcher, once
                                     ferry counts every connection accepted so far
                                     upgraded: the bytes go over RDMA on any machine),
                                     sends BYTES of a pattern and ends its side, then
                                     reads to the client's end. Errors of one client's
                                     connection (an intruder's) end only that one.
  intrusion.py pull-client IP PORT BYTES
                                     says GO, reads to the server's end and checks the
                                     pattern; then holds the connection until the file
                                     named by $INTRUSION_GO exists, if set.

Each prints one last line: what it sent or received, for the scenario to compare.
"""
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import upgrades  # noqa: E402

N = 40


# The listening sockets stay open for the whole run: a closed listener's rdma_cm side
# answers only a little longer, and an intruder that comes later (a slow machine)
# would find no listener at all and prove nothing.
LISTENERS = []


def serve(ip, port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ip, port))
    ls.listen(4)
    LISTENERS.append(ls)
    print("listening", flush=True)
    conn, _ = ls.accept()
    return conn


def read_all(conn):
    data = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk


def pattern(n):
    return bytes(i % 251 for i in range(251)) * (n // 251) + bytes(i % 251 for i in range(n % 251))


def push_all(ip, port, n, size):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ip, port))
    ls.listen(8)
    print("listening", flush=True)
    body = pattern(size)
    ferry = os.environ.get("INTRUSION_FERRY")
    accepted = [0]

    def serve_one(conn):
        try:
            conn.makefile("rb").readline()
            if ferry:
                upgrades.await_upgraded(ferry, accepted[0])
            conn.sendall(body)
            conn.shutdown(socket.SHUT_WR)
            read_all(conn)
        except OSError:
            pass
        conn.close()

    threads = []
    for _ in range(n):
        conn, _ = ls.accept()
        accepted[0] += 1
        t = threading.Thread(target=serve_one, args=(conn,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    print("server served %d connections" % n, flush=True)


def main():
    role, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "push-server":
        conn = serve(ip, port)
        f = conn.makefile("rb")
        hello = f.readline()
        time.sleep(1)
        for i in range(N):
            conn.sendall(b"SECRET-%02d\n" % i)
            time.sleep(0.2)
        bye = f.readline()
        print("server read %r then %r" % (hello, bye), flush=True)
    elif role == "quiet-client":
        conn = socket.create_connection((ip, port))
        go = os.environ.get("INTRUSION_GO")
        for _ in range(600):
            if not go or os.path.exists(go):
                break
            time.sleep(0.1)
        conn.sendall(b"HELLO\n")
        f = conn.makefile("rb")
        lines = [f.readline() for _ in range(N)]
        conn.sendall(b"BYE\n")
        good = sum(1 for i, l in enumerate(lines) if l == b"SECRET-%02d\n" % i)
        print("client received %d of %d" % (good, N), flush=True)
    elif role == "pw-server":
        conn = serve(ip, port)
        data = read_all(conn)
        want = b"".join(b"PASSWORD=%02d\n" % i for i in range(N))
        extra = len(data) - len(want)
        got = sum(1 for i in range(N) if (b"PASSWORD=%02d\n" % i) in data)
        print("server received %d of %d in order=%s extra_bytes=%d" % (got, N, data.endswith(want), extra),
              flush=True)
    elif role == "greet-server":
        conn = serve(ip, port)
        hello = conn.makefile("rb").readline()
        ferry = os.environ.get("INTRUSION_FERRY")
        for _ in range(300 if ferry else 0):
            out = subprocess.run([ferry, "stat", str(os.getpid())], capture_output=True, text=True).stdout
            if any(l.split()[:1] == ["upgraded"] and int(l.split()[1]) >= 1 for l in out.splitlines()):
                break
            time.sleep(0.1)
        conn.sendall(b"".join(b"WELCOME-%02d\n" % i for i in range(N)))
        conn.close()
        print("server read %r" % hello, flush=True)
    elif role == "push-all-server":
        push_all(ip, port, int(sys.argv[4]), int(sys.argv[5]))
    elif role == "pull-client":
        size = int(sys.argv[4])
        conn = socket.create_connection((ip, port))
        conn.sendall(b"GO\n")
        data = read_all(conn)
        print("client received %d of %d bytes, intact=%s" % (len(data), size, data == pattern(size)), flush=True)
        go = os.environ.get("INTRUSION_GO")
        for _ in range(600):
            if not go or os.path.exists(go):
                break
            time.sleep(0.1)
        conn.close()
    elif role == "pw-client":
        conn = socket.create_connection((ip, port))
        for i in range(N):
            conn.sendall(b"PASSWORD=%02d\n" % i)
            time.sleep(0.2)
        conn.close()
        print("client sent %d" % N, flush=True)
    else:
        sys.exit("unknown role " + role)


if __name__ == "__main__":
    main()
