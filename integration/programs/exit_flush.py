#!/usr/bin/env python3
"""exit_flush.py server IP PORT HOW SIZE | client IP PORT SIZE [DELAY [prefix]]

The server accepts one connection, reads one byte, sends SIZE bytes (a seeded stream)
and leaves at once, HOW: "_exit" (os._exit with the bytes still on their way), "exit"
(sys.exit), "close_exit" (close, then os._exit), "linger" (SO_LINGER {1, 5}, close,
os._exit), "exec" (os.execv of /bin/true: the socket is close-on-exec, as Python's
are), "sigterm" or "sigint" (the signal's default action, which ends the process),
"sigpipe" (SIGPIPE's default put back, then a write to a pipe nobody reads).
Kernel TCP delivers every byte after the process is gone. With FLUSH_GO set (a path),
the server sends only once that file exists (the test bed makes it once `ferry stat`
of the server counts the connection upgraded: every byte goes over RDMA, however slow
the upgrade; the server runs no `ferry stat` itself, which would fork). The client
sends the byte, waits DELAY seconds (default 0), reads to the end and prints the byte
count, the stream's sha256 and how it ended; exits 1 unless it got the whole stream
and an orderly end ("prefix": BLOCK repeated, of any length, instead, read at most 64 KiB
every 5 ms so that the sender always has bytes queued: the client of stream_exit, a
server whose process ends while a thread of it is still sending).
"""
import hashlib
import os
import random
import signal
import socket
import struct
import sys
import time


def stream(size):
    rng = random.Random(size)
    return rng.randbytes(size)


# stream_exit.cpp's block.
BLOCK = bytes(((i * 2654435761) >> 13) & 0xFF for i in range(1 << 20))


def server(ip, port, how, size):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((ip, port))
    listener.listen(1)
    print("listening", flush=True)
    conn, _ = listener.accept()
    conn.recv(1)
    while os.environ.get("FLUSH_GO") and not os.path.exists(os.environ["FLUSH_GO"]):
        time.sleep(0.05)
    conn.sendall(stream(size))
    if how == "exit":
        sys.exit(0)
    if how in ("sigterm", "sigint"):
        sig = signal.SIGTERM if how == "sigterm" else signal.SIGINT
        signal.signal(sig, signal.SIG_DFL)  # python's own SIGINT handler would exit()
        os.kill(os.getpid(), sig)
        time.sleep(60)
    if how == "sigpipe":
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # python starts with it ignored
        r, w = os.pipe()
        os.close(r)
        os.write(w, b"x")
        time.sleep(60)
    if how == "exec":
        os.execv("/bin/true", ["true"])
    if how == "linger":
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 5))
    if how in ("close_exit", "linger"):
        conn.close()
    os._exit(0)


def client(ip, port, size, delay, prefix):
    conn = socket.create_connection((ip, port))
    conn.sendall(b"x")
    time.sleep(delay)
    digest = hashlib.sha256()
    got = 0
    end = "eof"
    repeats = True  # prefix: every byte so far is BLOCK's, repeated
    try:
        while True:
            b = conn.recv(1 << 16 if prefix else 1 << 20)
            if not b:
                break
            if prefix:
                time.sleep(0.005)  # slower than the sender: its queue never empties
                i = 0
                while i < len(b):
                    o = (got + i) % len(BLOCK)
                    n = min(len(b) - i, len(BLOCK) - o)
                    repeats = repeats and b[i:i + n] == BLOCK[o:o + n]
                    i += n
            else:
                digest.update(b)
            got += len(b)
    except OSError as e:
        end = "error %s" % e.strerror
    if prefix:
        # How much arrived depends on the moment of the exit; what arrived must be intact.
        whole = repeats and got >= len(BLOCK)
        print("got %s MiB of the repeated block, %s, %s" % ("over 1" if got >= len(BLOCK) else "under 1",
                                                           "intact" if repeats else "NOT intact", end))
    else:
        whole = got == size and digest.hexdigest() == hashlib.sha256(stream(size)).hexdigest()
        print("got %d of %d bytes, %s, %s" % (got, size, "intact" if whole else "NOT intact", end))
    return 0 if whole and end == "eof" else 1


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    else:
        sys.exit(client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]) if len(sys.argv) > 5 else 0,
                        len(sys.argv) > 6 and sys.argv[6] == "prefix"))
