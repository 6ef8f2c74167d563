#!/usr/bin/env python3
"""Short connections ending every way a request/response program ends them, each
while its upgrade may still be in flight.

    endings.py IP PORT CONNECTIONS SEED [PATTERNS]

Connection i listens on PORT + i and connects to itself (one process, a thread per
end). Its pattern, sizes and pauses come from SEED:
    a: the client sends, shuts its side down, reads the reply to the end;
    b: the server speaks first and shuts down, the client reads to the end, answers
       and closes;
    c: both send and shut down at once (a thread each) while reading to the end;
    d: the client sends and closes; the server reads to the end;
    e: the server sends and closes; the client reads to the end;
    f: as e, with 2 to 4 MiB: more than the kernel buffers, so the server's upgrade is
       answered while it sends, and its close meets the client's proof (or comes
       just before the request, which must then find the connection let go).
PATTERNS (default abcde) are the patterns to choose from.
Every read has a 20 s timeout, so a hang shows as a failure. Prints how many
connections carried exactly the bytes kernel TCP carries, then each that did not;
exits 1 unless all did.
"""
import hashlib
import random
import socket
import sys
import threading
import time


def read_to_end(s):
    h, n = hashlib.sha256(), 0
    while True:
        d = s.recv(65536)
        if not d:
            return n, h.hexdigest()
        h.update(d)
        n += len(d)


def data(n):
    return bytes([n % 251]) * n


def digest(b):
    return len(b), hashlib.sha256(b).hexdigest()


def main(ip, port, count, seed, patterns):
    rnd = random.Random(seed)
    bad = []
    for i in range(count):
        pat = rnd.choice(patterns)
        x = rnd.choice([1, 1000, 100000, 1 << 20, 3 << 20])
        if pat == "f":
            pat, x = "e", rnd.choice([2 << 20, 3 << 20, 4 << 20])
        y = rnd.choice([1, 5000, 2 << 20])
        pauses = [rnd.random() * 0.05 if rnd.random() < 0.5 else 0 for _ in range(2)]
        lst = socket.socket()
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind((ip, port + i))
        lst.listen(1)
        got = {}

        def send_and_shut(s, n):
            s.sendall(data(n))
            s.shutdown(socket.SHUT_WR)

        def both_ways(s, n, pause):  # sends n bytes and shuts down while it reads to the end
            t = threading.Thread(target=send_and_shut, args=(s, n))
            t.start()
            time.sleep(pause)
            r = read_to_end(s)
            t.join()
            return r

        def server():
            s, _ = lst.accept()
            s.settimeout(20)
            try:
                if pat == "a":
                    time.sleep(pauses[0])
                    got["s"] = read_to_end(s)
                    s.sendall(data(y))
                elif pat == "b":
                    send_and_shut(s, x)
                    got["s"] = read_to_end(s)
                elif pat == "c":
                    got["s"] = both_ways(s, y, pauses[0])
                elif pat == "d":
                    got["s"] = read_to_end(s)
                else:
                    s.sendall(data(x))
                    got["s"] = digest(b"")
            except OSError as e:
                got["s"] = repr(e)
            s.close()

        th = threading.Thread(target=server)
        th.start()
        c = socket.create_connection((ip, port + i))
        c.settimeout(20)
        want = {"a": (data(x), data(y)), "b": (b"ok", data(x)), "c": (data(x), data(y)),
                "d": (data(x), b""), "e": (b"", data(x))}[pat]
        try:
            if pat in "ac":
                got["c"] = both_ways(c, x, pauses[1])
            elif pat == "b":
                time.sleep(pauses[1])
                got["c"] = read_to_end(c)
                c.sendall(b"ok")
            elif pat == "d":
                c.sendall(data(x))
                got["c"] = digest(b"")
            else:
                time.sleep(pauses[1])
                got["c"] = read_to_end(c)
        except OSError as e:
            got["c"] = repr(e)
        c.close()
        th.join()
        lst.close()
        if got.get("s") != digest(want[0]) or got.get("c") != digest(want[1]):
            bad.append(f"connection {i} ({pat}, {x} and {y} bytes): server {got.get('s')}, client {got.get('c')}")
    print(f"endings: {count - len(bad)} of {count} connections intact", flush=True)
    for b in bad:
        print(b)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                  sys.argv[5] if len(sys.argv) > 5 else "abcde"))
