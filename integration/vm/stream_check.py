#!/usr/bin/env python3
"""Byte-stream integrity through ferry, both directions at once.

    stream_check.py server IP PORT CONNECTIONS
    stream_check.py client IP PORT CONNECTIONS SIZE [SIZE...]

Environment:
  STREAM_SETTLE=SECONDS        each side sends its 8-byte length, then waits that long
                               (time for an upgrade to finish) before the rest;
  STREAM_FERRY=PATH            (the ferry launcher) each side sends its 8-byte length,
                               then waits until `ferry stat` of itself counts all its
                               CONNECTIONS upgraded (then STREAM_SETTLE more), so that
                               every body byte crosses RDMA however slow the upgrades:
                               it prints "upgraded N, registered R bytes" as it first
                               sees them all (R: rdma_registered_bytes of that reading,
                               every connection's rings: none has ended yet); if they
                               never come (upgrades.py's limit), an error at the end;
  STREAM_DECIDED=1             with STREAM_FERRY, waits until all CONNECTIONS are
                               decided (upgraded or kept on TCP for a counted reason,
                               upgrades.decided) rather than upgraded, and prints
                               "decided N, upgraded U": for scenarios where some must
                               stay on TCP;
  STREAM_SETTLE_UNTIL=FILE     each side sends its 8-byte length, then waits until FILE
                               exists (after STREAM_SETTLE; 120 s at most): a scenario
                               looks at the processes in that pause, for as long as
                               its look takes;
  STREAM_SERVER_FIRST=1        the server speaks first: a greeting of GREETING bytes
                               right after accept, which the client reads and checks
                               before it sends anything;
  STREAM_ACCEPT_DELAY=SECONDS  the server accepts nothing for that long after listening
                               (clients connect and send meanwhile);
  STREAM_ACCEPT_AFTER=FILE     the server accepts nothing until FILE exists (120 s at
                               most);
  STREAM_SPLICE=1              the streams' bodies go through pipes: each sender
                               writes into a pipe and splice()s it into the socket,
                               each receiver splice()s from the socket into a pipe and
                               reads that;
  STREAM_FORK_EVERY=BYTES      each sender forks a child every BYTES bytes it sends, as
                               a Redis BGSAVE does: the child sleeps 50 ms and exits
                               without touching any socket, while the parent goes on;
  STREAM_SPIN=1                receivers never block: each receive is MSG_DONTWAIT,
                               and one that finds nothing sleeps 1 ms and tries again
                               (as a program polling its sockets from a busy loop does).

Every connection carries, each way at the same time: an 8-byte length, that many
random bytes, and the sha256 of those bytes. Each side checks what it received. The
client picks connection i's size from the SIZE list (cycling); the server answers
with the same size. Exit status 0 only if every byte of every connection matched.
Blocking sockets only (no select/poll/epoll; STREAM_SPIN: MSG_DONTWAIT on them).
"""
import fcntl
import hashlib
import os
import socket
import struct
import sys
import termios
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "programs"))
import upgrades  # noqa: E402

CHUNK = 1 << 20
GREETING = bytes((i * 7 + 3) & 0xFF for i in range(100003))
SERVER_FIRST = os.environ.get("STREAM_SERVER_FIRST") == "1"
KERNEL = {"acked": 0, "received": 0}
KERNEL_LOCK = threading.Lock()


def note_kernel_bytes(sock):
    """Adds the kernel's own count of this TCP connection's payload bytes (tcp_info
    bytes_acked plus what its send queue still holds, SIOCOUTQ: the peer's last ACK
    may still be delayed; bytes_received) to the totals: what really crossed kernel
    TCP. The two are read between two tcp_info reads that agree: an ACK arriving in
    between would leave its bytes out of both."""
    for _ in range(1000):
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        outq = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
        again = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        if len(info) < 136 or info[120:136] == again[120:136]:
            break
    if len(info) >= 136:
        acked, received = struct.unpack_from("QQ", info, 120)
        with KERNEL_LOCK:
            KERNEL["acked"] += acked + outq
            KERNEL["received"] += received


FERRY = os.environ.get("STREAM_FERRY")
SETTLE = {"lock": threading.Lock(), "want": 0, "seen": 0, "gave_up": False}
DECIDED = os.environ.get("STREAM_DECIDED") == "1"


def settle():
    """Between a stream's length and its body: with STREAM_FERRY, until this process
    counts all its connections upgraded; then STREAM_SETTLE seconds."""
    if FERRY:
        with SETTLE["lock"]:  # the first to ask waits; the others find the count at once
            want = SETTLE["want"]
            if SETTLE["seen"] < want and not SETTLE["gave_up"]:
                deadline = time.monotonic() + upgrades.LIMIT
                while True:
                    c = upgrades.counters(FERRY)
                    seen = upgrades.decided(c) if DECIDED else c.get("upgraded", 0)
                    if seen >= want:
                        SETTLE["seen"] = seen
                        if DECIDED:
                            print(f"decided {seen}, upgraded {c.get('upgraded', 0)}", flush=True)
                        else:
                            print(f"upgraded {seen}, registered {c.get('rdma_registered_bytes', 0)} bytes",
                                  flush=True)
                        break
                    if time.monotonic() > deadline:
                        SETTLE["gave_up"] = True  # finish() says so
                        SETTLE["seen"] = seen
                        break
                    time.sleep(0.1)
    wait = float(os.environ.get("STREAM_SETTLE", "0"))
    if wait:
        time.sleep(wait)
    until = os.environ.get("STREAM_SETTLE_UNTIL")
    for _ in range(1200 if until else 0):
        if os.path.exists(until):
            break
        time.sleep(0.1)


FORK_EVERY = int(os.environ.get("STREAM_FORK_EVERY", "0"))
SPLICE = os.environ.get("STREAM_SPLICE") == "1"
SPIN = os.environ.get("STREAM_SPIN") == "1"


def take(sock, n):
    """sock.recv(n), or with STREAM_SPIN the same without ever blocking in it."""
    if not SPIN:
        return sock.recv(n)
    while True:
        try:
            return sock.recv(n, socket.MSG_DONTWAIT)
        except BlockingIOError:
            time.sleep(0.001)


def send_piece(sock, piece):
    if not SPLICE:
        sock.sendall(piece)
        return
    r, w = os.pipe()
    try:
        view = memoryview(piece)
        while view:
            n = os.write(w, view[: 1 << 16])
            view = view[n:]
            while n:
                n -= os.splice(r, sock.fileno(), n)
    finally:
        os.close(r)
        os.close(w)


def recv_piece(sock, n):
    if not SPLICE:
        return take(sock, n)
    r, w = os.pipe()
    try:
        got = os.splice(sock.fileno(), w, min(n, 1 << 16))
        return os.read(r, got) if got else b""
    finally:
        os.close(r)
        os.close(w)


def fork_idle_child():
    """A child that never touches the parent's sockets, then exits; reaped at once
    if it already has, else by the next call."""
    pid = os.fork()
    if pid == 0:
        time.sleep(0.05)
        os._exit(0)
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break


def send_stream(sock, size):
    h = hashlib.sha256()
    sock.sendall(struct.pack("!Q", size))
    settle()
    left, since_fork = size, 0
    while left:
        # odd piece sizes exercise ring wrap-around and partial writes
        piece = os.urandom(min(left, CHUNK - (left % 4093)))
        h.update(piece)
        send_piece(sock, piece)
        left -= len(piece)
        since_fork += len(piece)
        if FORK_EVERY and since_fork >= FORK_EVERY:
            since_fork = 0
            fork_idle_child()
    sock.sendall(h.digest())


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = take(sock, min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_stream(sock):
    return recv_body(sock, struct.unpack("!Q", recv_exact(sock, 8))[0])


def recv_body(sock, size):
    """The stream after its length: the bytes, then their sha256, checked."""
    h = hashlib.sha256()
    left = size
    while left:
        chunk = recv_piece(sock, min(left, 1 << 20))
        if not chunk:
            raise EOFError(f"EOF with {left} of {size} bytes missing")
        h.update(chunk)
        left -= len(chunk)
    digest = recv_exact(sock, 32)
    if digest != h.digest():
        raise ValueError(f"sha256 mismatch on a {size}-byte stream")
    return size


def converse(sock, size, errors, label):
    try:
        sender = threading.Thread(target=send_stream, args=(sock, size))
        sender.start()
        got = recv_stream(sock)
        sender.join()
        sock.shutdown(socket.SHUT_WR)
        if take(sock, 1) != b"":
            raise ValueError("data after the stream")
        note_kernel_bytes(sock)
        return got
    except Exception as e:  # noqa: BLE001 - reported, then the run fails
        errors.append(f"{label}: {e!r}")
        return -1
    finally:
        sock.close()


def finish(errors, summary):
    """Prints every error and the one-line summary (with the kernel's TCP byte counts)."""
    if SETTLE["gave_up"]:
        errors.append(f"only {SETTLE['seen']} of {SETTLE['want']} connections "
                      f"{'decided' if DECIDED else 'upgraded'} after "
                      f"{upgrades.LIMIT:.0f} s")
    for e in errors:
        print("ERROR", e, flush=True)
    print(f"{summary}, {len(errors)} errors; kernel TCP bytes sent {KERNEL['acked']} "
          f"received {KERNEL['received']}", flush=True)
    return 1 if errors else 0


def server(ip, port, count):
    lsock = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((ip, port))
    lsock.listen(256)
    print("listening", flush=True)
    time.sleep(float(os.environ.get("STREAM_ACCEPT_DELAY", "0")))
    after = os.environ.get("STREAM_ACCEPT_AFTER")
    for _ in range(1200):
        if not after or os.path.exists(after):
            break
        time.sleep(0.1)
    errors, threads = [], []

    def serve(conn, i):
        # The server learns the size from the client, then answers with as many bytes.
        try:
            if SERVER_FIRST:
                conn.sendall(GREETING)
            size = struct.unpack("!Q", recv_exact(conn, 8))[0]
        except Exception as e:  # noqa: BLE001
            errors.append(f"server {i}: {e!r}")
            conn.close()
            return
        sender = threading.Thread(target=send_stream, args=(conn, size))
        sender.start()
        try:
            recv_body(conn, size)
            sender.join()
            conn.shutdown(socket.SHUT_WR)
            if conn.recv(1) != b"":
                raise ValueError("data after the stream")
            note_kernel_bytes(conn)
        except Exception as e:  # noqa: BLE001
            errors.append(f"server {i}: {e!r}")
        finally:
            sender.join()
            conn.close()

    for i in range(count):
        conn, _ = lsock.accept()
        t = threading.Thread(target=serve, args=(conn, i))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    lsock.close()
    return finish(errors, f"server: {count} connections")


def client(ip, port, count, sizes):
    errors, threads, total = [], [], [0]

    def one(i):
        size = sizes[i % len(sizes)]
        sock = socket.create_connection((ip, port))
        if SERVER_FIRST:
            try:
                if recv_exact(sock, len(GREETING)) != GREETING:
                    raise ValueError("the greeting differs")
            except Exception as e:  # noqa: BLE001
                errors.append(f"client {i}: {e!r}")
                sock.close()
                return
        got = converse(sock, size, errors, f"client {i}")
        if got >= 0:
            total[0] += got

    for i in range(count):
        t = threading.Thread(target=one, args=(i,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return finish(errors, f"client: {count} connections, {total[0]} bytes received intact")


def main(argv):
    role, ip, port, count = argv[1], argv[2], int(argv[3]), int(argv[4])
    SETTLE["want"] = count
    if role == "server":
        return server(ip, port, count)
    return client(ip, port, count, [int(s) for s in argv[5:]] or [1 << 20])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
