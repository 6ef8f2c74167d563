"""What a test program under ferry knows of its own upgrades: its counters, read with
`ferry stat` of its own pid, and a wait until they count enough upgraded connections.

A program that sends its bulk only once every connection it has open has upgraded
makes "its bytes went over RDMA" a verdict that holds on any machine, however slow the
upgrade: the bytes before it are the program's first exchange, a fixed few.
"""
import os
import subprocess
import time

# How long a wait for upgrades may last: a limit for hangs, far beyond any upgrade
# (milliseconds on an idle machine, seconds on a loaded one).
LIMIT = 120.0


def counters(ferry, pid=None):
    """The counters of process pid (this one by default), as `ferry stat` reads them;
    {} when it cannot."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    try:
        out = subprocess.run([ferry, "stat", str(pid or os.getpid())], env=env, capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    got = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 2 and f[1].isdigit():
            got[f[0]] = int(f[1])
    return got


def decided(got):
    """Connections whose upgrade has been decided, in counters got: those upgraded and
    those kept on TCP for a counted reason (every tcp_* counter but tcp_sockets)."""
    return got.get("upgraded", 0) + sum(v for k, v in got.items() if k.startswith("tcp_") and k != "tcp_sockets")


def await_upgraded(ferry, want, limit=LIMIT):
    """Waits until this process counts want connections upgraded (limit seconds at
    most); returns the count last seen."""
    deadline = time.monotonic() + limit
    while True:
        got = counters(ferry).get("upgraded", 0)
        if got >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.1)
