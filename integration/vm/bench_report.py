#!/usr/bin/env python3
"""The benchmark table: medians per metric and system, ratios, targets, and where ferry's
bytes went (its own counters). Writes the same figures as JSON.
    bench_report.py RESULTS_DIR LOG_DIR[:LOG_DIR...] RUNS SECONDS JSON_OUT [HOSTS]
RESULTS_DIR holds METRIC.SYSTEM (one figure per run) and METRIC.SYSTEM.err (why a run failed).
Ferry's counters are summed over the logs of every LOG_DIR. HOSTS 2: the runs crossed the
two-host test bed's wire (servers on host 1, clients on host 2).
"""
import glob
import json
import os
import re
import statistics
import sys

SYSTEMS = ["verbs", "tcp", "rsocket", "ferry"]
# metric, label, unit, True when lower is better
METRICS = [
    ("pp64_p50", "ping-pong 64 B p50", "usec", True),
    ("pp64_p99", "ping-pong 64 B p99", "usec", True),
    ("pp4096_p50", "ping-pong 4 KiB p50", "usec", True),
    ("pp4096_p99", "ping-pong 4 KiB p99", "usec", True),
    ("iperf3_gbps", "iperf3 64 KiB stream", "Gbit/s", False),
    ("sockperf_tp_gbps", "sockperf tp 65000 B", "Gbit/s", False),
    ("redis_set_rps", "redis SET -c50 -P16", "req/s", False),
    ("redis_get_rps", "redis GET -c50 -P16", "req/s", False),
    ("nginx_rps", "nginx 4 workers + wrk -c16", "req/s", False),
    ("connect_rate", "connect+1B+close", "conn/s", False),
    ("redis_cpu_us", "redis server CPU -P16", "us/req", True),
    ("redis_np_set_rps", "redis SET -c50", "req/s", False),
    ("redis_np_get_rps", "redis GET -c50", "req/s", False),
    ("redis_np_cpu_us", "redis server CPU -c50", "us/req", True),
    ("fresh_mbps", "fresh conn 16 MiB", "MB/s", False),
    ("fork2m_cps", "fork srv 2 MiB each way", "conn/s", False),
    ("many_s", "many conns burst 16 KiB", "s", True),
]
# Verbs-only reference rows: (metric, label, the ferry metric it is compared with)
REFERENCES = [("send64_p50", "verbs SEND/RECV 64 B p50 (ib_send_lat)", "pp64_p50")]
# tag prefix of the logs each metric's ferry runs wrote
LOG_PREFIX = {"pp64": "pp64.ferry.", "pp4096": "pp4096.ferry.", "iperf3": "iperf3.ferry.",
              "sockperf_tp": "sptp.ferry.", "redis": "redis.ferry.", "nginx": "nginx.ferry.",
              "connect_rate": "conn.ferry.", "redis_np": "redisnp.ferry.", "fresh": "fresh.ferry.",
              "fork2m": "fork2m.ferry.", "many": "many.ferry."}


def read_figures(results, metric, system):
    path = os.path.join(results, f"{metric}.{system}")
    values = []
    if os.path.exists(path):
        for line in open(path):
            try:
                values.append(float(line.split()[0]))
            except (ValueError, IndexError):
                pass
    err_path = path + ".err"
    error = open(err_path).read().strip() if os.path.exists(err_path) else None
    return values, error


def counters(logs, prefix):
    """Sum over the processes of a metric's ferry runs: each process's largest reading
    (its log, TAG.PID.log, and a server's `ferry stat`, TAG.PID.stat, are one process)."""
    best = {}
    paths = [p for d in logs.split(":") for p in sorted(glob.glob(os.path.join(d, prefix + "*")))]
    for path in paths:
        stem, ext = os.path.splitext(os.path.basename(path))
        if ext not in (".log", ".stat"):
            continue
        mine = best.setdefault(stem, {})
        for line in open(path, errors="replace"):
            m = re.match(r"\s*([a-z_]+)\s+(\d+)\s*(#.*)?$", line)
            if m:
                mine[m.group(1)] = max(mine.get(m.group(1), 0), int(m.group(2)))
    total = {}
    for mine in best.values():
        for k, v in mine.items():
            total[k] = total.get(k, 0) + v
    return total


def main():
    results, logs, runs, secs, json_out = sys.argv[1:6]
    hosts = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    # "base": ferry from another build (bench --base), a change's before.
    systems = SYSTEMS + (["base"] if glob.glob(os.path.join(results, "*.base*")) else [])
    others = [("verbs", 9), ("tcp", 8), ("rsocket", 8)] + ([("base", 8)] if "base" in systems else [])
    table = {}
    for metric, label, unit, lower in METRICS:
        row = {"label": label, "unit": unit, "lower_is_better": lower, "systems": {}}
        for system in systems:
            values, error = read_figures(results, metric, system)
            if values or error:
                row["systems"][system] = {"runs": values,
                                          "median": statistics.median(values) if values else None,
                                          "failed_runs": int(runs) - len(values), "error": error}
        table[metric] = row

    def cell(metric, system):
        entry = table[metric]["systems"].get(system)
        if entry is None:
            return "-"
        if entry["median"] is None:
            return "FAILED"
        v = entry["median"]
        text = f"{v:.1f}" if v < 1000 else f"{v:.0f}"
        return text + ("*" if entry["failed_runs"] else "")

    def ratio(metric, system):
        f = table[metric]["systems"].get("ferry", {}).get("median")
        o = table[metric]["systems"].get(system, {}).get("median")
        return f / o if f and o else None

    if hosts == 2:
        print(f"\nferry benchmark: Soft-RoCE (rxe) across two hosts, TCG-emulated VMs of one CPU each on a"
              f" wire,\nservers on 198.18.0.1, clients on 198.18.0.2; medians of {runs} runs x {secs} s.")
    else:
        print(f"\nferry benchmark: Soft-RoCE (rxe) in a TCG-emulated VM, medians of {runs} runs x {secs} s.")
    print("Absolute figures are emulated; compare within a row. * = some runs failed (see below).")
    head = f"{'':22} {'unit':7}" + "".join(f"{s:>10}" for s in systems) + \
        "".join(f"{'f/' + o[:5]:>{w}}" for o, w in others)
    print(head)
    for metric, label, unit, lower in METRICS:
        if not any(table[metric]["systems"].get(s) for s in systems):
            continue  # a row not run (bench --only)
        line = f"{label:22} {unit:7}" + "".join(f"{cell(metric, s):>10}" for s in systems)
        for other, width in others:
            r = ratio(metric, other)
            line += f"{r:>{width}.2f}" if r else f"{'-':>{width}}"
            table[metric][f"ferry_over_{other}"] = r
        print(line)
    print("(latency rows: lower is better, so a ratio < 1 favours ferry; rate rows: higher is better)")
    references = {}
    for metric, label, against in REFERENCES:
        values, error = read_figures(results, metric, "verbs")
        if not values:
            continue
        v = statistics.median(values)
        f = table[against]["systems"].get("ferry", {}).get("median")
        references[metric] = {"label": label, "median": v, "runs": values,
                              "ferry_over_it": f / v if f else None}
        print(f"reference: {label} = {v:.1f} usec" + (f"; ferry / it = {f / v:.2f}" if f else ""))

    print("\nWhere ferry's bytes went (its counters, both ends, all runs" +
          (": servers on host 1, clients on host 2)" if hosts == 2 else ")"))
    print(f"  {'runs of':14}{'upgraded':>9}{'rdma_sent':>16}{'tcp_sent':>14}{'rdma share':>11}")
    where = {}
    for key, prefix in LOG_PREFIX.items():
        c = counters(logs, prefix)
        if not c:
            continue  # not run (bench --only)
        rdma, tcp = c.get("bytes_rdma_sent", 0), c.get("bytes_tcp_sent", 0)
        share = rdma / (rdma + tcp) if rdma + tcp else 0.0
        where[key] = {"upgraded": c.get("upgraded", 0), "bytes_rdma_sent": rdma, "bytes_tcp_sent": tcp,
                      "rdma_share": share}
        flag = "" if share >= 0.5 else "   <- mostly kernel TCP: not a measurement of ferry's RDMA path"
        if key == "connect_rate":
            flag = "   (each connection closes before its upgrade could finish: TCP by design)"
        print(f"  {key:14}{c.get('upgraded', 0):>9}{rdma:>16}{tcp:>14}{share:>11.3f}{flag}")
    many = os.environ.get("MANY_CONNS")
    idle = {}
    for side in ("server", "client"):
        c = {}
        for path in [p for d in logs.split(":") for p in sorted(glob.glob(os.path.join(d, f"many.idle.*.{side}.stat")))]:
            for line in open(path, errors="replace"):
                m = re.match(r"\s*([a-z_]+)\s+(\d+)\s*(#.*)?$", line)
                if m and m.group(1) in ("upgraded", "rdma_registered_bytes"):
                    c.setdefault(m.group(1), []).append(int(m.group(2)))
        if c.get("rdma_registered_bytes") and many:
            reg = statistics.median(c["rdma_registered_bytes"])
            ups = statistics.median(c.get("upgraded", [0]))
            idle[side] = {"connections": int(many), "upgraded": ups, "registered_bytes": reg,
                          "registered_per_connection": reg / int(many)}
            print(f"  {many} connections idle, {side}: {ups:.0f} upgraded, {reg / 2**20:.1f} MiB registered,"
                  f" {reg / int(many) / 1024:.1f} KiB per connection (target <= 16 KiB)")
    where["many_idle"] = idle

    print("\nTargets")
    def share(key):
        w = where.get(key)
        return w["rdma_share"] if w and w["bytes_rdma_sent"] + w["bytes_tcp_sent"] else None

    at_least = lambda x: (lambda r: r >= x)
    at_most = lambda x: (lambda r: r <= x)
    targets = [
        ("ping-pong 64 B p50 <= 1.1 x raw verbs", ratio("pp64_p50", "verbs"), at_most(1.1)),
        ("ping-pong 64 B p99 <= 1.2 x raw verbs", ratio("pp64_p99", "verbs"), at_most(1.2)),
        ("iperf3 stream >= 0.95 x raw verbs", ratio("iperf3_gbps", "verbs"), at_least(0.95)),
        ("sockperf stream >= 0.95 x raw verbs", ratio("sockperf_tp_gbps", "verbs"), at_least(0.95)),
        ("ping-pong 64 B p50 below kernel TCP", ratio("pp64_p50", "tcp"), lambda r: r < 1.0),
        ("connect+1B+close >= 1.0 x kernel TCP", ratio("connect_rate", "tcp"), at_least(1.0)),
        ("redis SET -c50 -P16 >= 1.0 x kernel TCP", ratio("redis_set_rps", "tcp"), at_least(1.0)),
        ("redis GET -c50 -P16 >= 1.0 x kernel TCP", ratio("redis_get_rps", "tcp"), at_least(1.0)),
        ("redis SET -c50 >= 1.0 x kernel TCP", ratio("redis_np_set_rps", "tcp"), at_least(1.0)),
        ("redis GET -c50 >= 1.0 x kernel TCP", ratio("redis_np_get_rps", "tcp"), at_least(1.0)),
        ("nginx + wrk -c16 >= 1.0 x kernel TCP", ratio("nginx_rps", "tcp"), at_least(1.0)),
        ("fresh connection's 16 MiB >= 99% over RDMA", share("fresh"), at_least(0.99)),
        ("2 MiB each way per connection, forking server >= 90% over RDMA", share("fork2m"), at_least(0.90)),
        ("redis -c50 >= 95% of bytes over RDMA", share("redis_np"), at_least(0.95)),
    ]
    for side, w in where.get("many_idle", {}).items():
        targets.append((f"many connections: every one upgraded ({side})", w["upgraded"] / w["connections"],
                        at_least(1.0)))
        targets.append((f"many connections idle: <= 16 KiB registered per connection ({side}, KiB)",
                        w["registered_per_connection"] / 1024, at_most(16)))
    for metric, label, unit, lower in METRICS:
        r = ratio(metric, "rsocket")
        if r is not None:
            targets.append((f"{label} at least as good as rsocket", r, (lambda r: r <= 1.0) if lower else
                            (lambda r: r >= 1.0)))
    json_targets = []
    for text, r, ok in targets:
        verdict = "n/a" if r is None else ("met" if ok(r) else "MISSED")
        print(f"  {verdict:7} {text}" + (f" (ratio {r:.2f})" if r is not None else ""))
        json_targets.append({"target": text, "ratio": r, "verdict": verdict})

    print("\nFailures (first error per metric and system)")
    any_failure = False
    for metric, label, unit, lower in METRICS:
        for system, entry in table[metric]["systems"].items():
            if entry["error"]:
                any_failure = True
                print(f"  {system:8} {label:22} {entry['failed_runs']}/{runs} runs failed: {entry['error']}")
    if not any_failure:
        print("  none")

    with open(json_out, "w") as f:
        report = {"runs": int(runs), "seconds": float(secs), "metrics": table, "references": references,
                  "targets": json_targets,
                  "ferry_bytes": where}
        if hosts == 2:
            report["hosts"] = 2
        json.dump(report, f, indent=1)
    print(f"\nJSON: {os.path.basename(json_out)}")


if __name__ == "__main__":
    main()
