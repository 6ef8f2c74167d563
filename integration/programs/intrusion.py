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

Each prints one last line: what it sent or received, for the scenario to compare.
"""
import os
import socket
import sys
import time

N = 40


def serve(ip, port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ip, port))
    ls.listen(4)
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
