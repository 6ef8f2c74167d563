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
]
# Verbs-only reference rows: (metric, label, the ferry metric it is compared with)
REFERENCES = [("send64_p50", "verbs SEND/RECV 64 B p50 (ib_send_lat)", "pp64_p50")]
# tag prefix of the logs each metric's ferry runs wrote
LOG_PREFIX = {"pp64": "pp64.ferry.", "pp4096": "pp4096.ferry.", "iperf3": "iperf3.ferry.",
              "sockperf_tp": "sptp.ferry.", "redis": "redis.ferry.", "nginx": "nginx.ferry.",
              "connect_rate": "conn.ferry."}


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
    """Sum over the processes of a metric's ferry runs: each process's largest reading."""
    total = {}
    paths = [p for d in logs.split(":") for p in sorted(glob.glob(os.path.join(d, prefix + "*")))]
    for path in paths:
        if not (path.endswith(".log") or path.endswith(".stat")):
            continue
        best = {}
        for line in open(path, errors="replace"):
            m = re.match(r"\s*([a-z_]+)\s+(\d+)\s*(#.*)?$", line)
            if m:
                best[m.group(1)] = max(best.get(m.group(1), 0), int(m.group(2)))
        for k, v in best.items():
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

    print("\nTargets")
    targets = [
        ("ping-pong 64 B p50 <= 1.3 x raw verbs", ratio("pp64_p50", "verbs"), lambda r: r <= 1.3),
        ("iperf3 stream >= 0.85 x raw verbs", ratio("iperf3_gbps", "verbs"), lambda r: r >= 0.85),
        ("sockperf stream >= 0.85 x raw verbs", ratio("sockperf_tp_gbps", "verbs"), lambda r: r >= 0.85),
        ("ping-pong 64 B p50 below kernel TCP", ratio("pp64_p50", "tcp"), lambda r: r < 1.0),
    ]
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

    print("\nWhere ferry's bytes went (its counters, both ends, all runs" +
          (": servers on host 1, clients on host 2)" if hosts == 2 else ")"))
    print(f"  {'runs of':14}{'upgraded':>9}{'rdma_sent':>16}{'tcp_sent':>14}{'rdma share':>11}")
    where = {}
    for key, prefix in LOG_PREFIX.items():
        c = counters(logs, prefix)
        rdma, tcp = c.get("bytes_rdma_sent", 0), c.get("bytes_tcp_sent", 0)
        share = rdma / (rdma + tcp) if rdma + tcp else 0.0
        where[key] = {"upgraded": c.get("upgraded", 0), "bytes_rdma_sent": rdma, "bytes_tcp_sent": tcp,
                      "rdma_share": share}
        flag = "" if share >= 0.5 else "   <- mostly kernel TCP: not a measurement of ferry's RDMA path"
        if key == "connect_rate":
            flag = "   (each connection closes before its upgrade could finish: TCP by design)"
        print(f"  {key:14}{c.get('upgraded', 0):>9}{rdma:>16}{tcp:>14}{share:>11.3f}{flag}")

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
