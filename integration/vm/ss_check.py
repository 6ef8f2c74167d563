#!/usr/bin/env python3
"""Checks `ferry ss -j` of the ferry-ss row (integration/vm/programs.sh) against the
counters of the same processes: every connection listed once, each on RDMA or on TCP
with its reason, the bytes it carried attributed to it.

    ss_check.py settled SS_JSON N                 0 once N rows, none still upgrading
    ss_check.py server SS_JSON STAT PORT N BYTES  the server's N connections
    ss_check.py client SS_JSON STAT N WHY         a client's N connections; WHY: the
                                                  reason each is on TCP, or - for any
Prints one line saying what is wrong (exit 1), or what it saw (exit 0)."""
import json
import re
import sys


def counter(stat, name):
    for line in open(stat):
        m = re.match(r"\s*([a-z_]+)\s+(\d+)", line)
        if m and m.group(1) == name:
            return int(m.group(2))
    return 0


def fail(text):
    print(text)
    sys.exit(1)


def common(rows, n, stat):
    if len(rows) != n:
        fail(f"{len(rows)} connections listed, not {n}")
    if len({r["inode"] for r in rows}) != n:
        fail("a connection listed twice")
    for r in rows:
        if r["fd"] < 0:
            fail(f"inode {r['inode']}: no descriptor of the process holds it")
        if r["tcp_state"] != "ESTAB":
            fail(f"fd {r['fd']}: TCP state {r['tcp_state']}, not ESTAB")
        if r["path"] == "tcp>rdma":
            fail(f"fd {r['fd']}: still upgrading")
        if r["path"] == "tcp" and not r["why"]:
            fail(f"fd {r['fd']}: on TCP without a reason")
        if r["path"] == "rdma" and (r["registered"] <= 0 or r["qp"] <= 0):
            fail(f"fd {r['fd']}: on RDMA with no memory registered ({r['registered']}) or no queue pair ({r['qp']})")
    rdma = sum(r["path"] == "rdma" for r in rows)
    if rdma != counter(stat, "upgraded"):
        fail(f"{rdma} connections listed on RDMA, the counters say {counter(stat, 'upgraded')} upgraded")
    return rdma


def main():
    mode, rows = sys.argv[1], json.load(open(sys.argv[2]))
    if mode == "settled":
        sys.exit(0 if len(rows) == int(sys.argv[3]) and all(r["path"] != "tcp>rdma" for r in rows) else 1)
    stat = sys.argv[3]
    if mode == "server":
        port, n, each = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
        rdma = common(rows, n, stat)
        for r in rows:
            if not r["local"].endswith(f":{port}") or r["role"] != "server":
                fail(f"fd {r['fd']}: {r['role']} {r['local']}, not the server's port {port}")
            if (r["tcp_received"] or 0) + r["rdma_received"] < each:
                fail(f"fd {r['fd']}: {r['tcp_received']} bytes received on TCP and {r['rdma_received']} over RDMA,"
                     f" fewer than the {each} sent to it")
        whys = sorted({r["why"] for r in rows if r["path"] == "tcp"})
        print(f"server: {n} connections, {rdma} over RDMA, {n - rdma} on TCP ({', '.join(whys) or '-'})")
    else:
        n, why = int(sys.argv[4]), sys.argv[5]
        rdma = common(rows, n, stat)
        for r in rows:
            if r["role"] != "client":
                fail(f"fd {r['fd']}: role {r['role']}")
            if why != "-" and (r["path"] != "tcp" or r["why"] != why):
                fail(f"fd {r['fd']}: {r['path']} ({r['why']}), not on TCP for {why}")
        print(f"client: {n} connections, {rdma} over RDMA")


if __name__ == "__main__":
    main()
