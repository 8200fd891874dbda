"""Issue 23's targets on the 16-core device machine, from the raw runs of
docs/results/fleet/scale/run.sh (protocol 2, 96a3fbe, and protocol 3, two
rounds each in the order p2 p3 p3 p2; Redis pinned to one core, the bench on
the other 15), and of floor256.sh (target 2 with the fenced floor beside). Every ratio is within one run; no figure is typed by hand.

    python3 docs/results/fleet/scale/summary.py
"""
import json
import os

D = os.path.dirname(os.path.abspath(__file__))
RUNS = ["p2-1", "p2-2", "p3-1", "p3-2"]


def rows(run):
    with open(os.path.join(D, run + ".jsonl")) as f:
        return [json.loads(l) for l in f if l.strip()]


def pick(rs, strategy, keys, processes):
    for r in rs:
        if (r["strategy"], r["keys"], r["processes"]) == (strategy, keys, processes):
            return r
    raise KeyError((strategy, keys, processes))


def ratio(field, keys, processes, against="bare:10"):
    def f(rs):
        a, b = pick(rs, "pubsub", keys, processes), pick(rs, against, keys, processes)
        d = 0 if field == "acq_per_s" else 1
        return a[field] / b[field], f"{a[field]:,.{d}f} / {b[field]:,.{d}f} = {a[field] / b[field]:.2f}×"
    return f


def value(field, keys, processes, fmt):
    def f(rs):
        v = pick(rs, "pubsub", keys, processes)[field]
        return v, fmt(v)
    return f


def growth(rs):
    a4, a12 = pick(rs, "pubsub", 1, 4), pick(rs, "pubsub", 1, 12)
    r = a12["redis_cpu_us_per_acq"] / a4["redis_cpu_us_per_acq"]
    return r, f"{a4['redis_cpu_us_per_acq']:.1f} → {a12['redis_cpu_us_per_acq']:.1f} = {r:.2f}×"


def worst(field, agg, fmt):
    def f(rs):
        v = agg(pick(rs, "pubsub", 1, p)[field] for p in (1, 4, 12))
        return v, fmt(v)
    return f


def round_robin_jain(acquisitions, workers):
    """Jain's index of the fairest split of `acquisitions` over `workers`."""
    q, r = divmod(acquisitions, workers)
    return acquisitions ** 2 / (workers * (r * (q + 1) ** 2 + (workers - r) * q ** 2))


TARGETS = [
    ("1. uncontended (10,000 keys, 4 × 64, hold 0): Redis CPU/acq ≤ 2.0× bare's",
     ratio("redis_cpu_us_per_acq", 10000, 4), lambda v: v <= 2.0),
    ("2. 256 keys, 4 × 64, hold 1 ms: Redis CPU/acq ≤ 1.5× bare's",
     ratio("redis_cpu_us_per_acq", 256, 4), lambda v: v <= 1.5),
    ("2. 256 keys: acquire calls/acq ≤ 1.1",
     value("attempts_per_acq", 256, 4, lambda v: f"{v:.3f}"), lambda v: v <= 1.1),
    ("2. 256 keys: acq/s ≥ 0.8× bare's",
     ratio("acq_per_s", 256, 4), lambda v: v >= 0.8),
    ("2. 256 keys: wait p99 ms ≤ bare's",
     ratio("wait_p99_ms", 256, 4), lambda v: v <= 1.0),
    ("3. one key: Redis CPU/acq at 12 processes ≤ 1.2× that at 4", growth, lambda v: v <= 1.2),
    ("3. one key: at 12 processes ≤ 0.5× bare's",
     ratio("redis_cpu_us_per_acq", 1, 12), lambda v: v <= 0.5),
    ("3. one key, 1 / 4 / 12 processes: requests/acq ≤ 2.0 (the most)",
     worst("redis_requests_per_acq", max, lambda v: f"{v:.3f}"), lambda v: v <= 2.0),
    ("3. one key: acquire calls/acq ≤ 1.0 (the most)",
     worst("attempts_per_acq", max, lambda v: f"{v:.3f}"), lambda v: v <= 1.0),
    ("3. one key: Jain ≥ 0.99 (the least)",
     worst("jain_fairness", min, lambda v: f"{v:.3f}"), lambda v: v >= 0.99),
    ("3. one key: violations (all three)",
     worst("violations", max, lambda v: f"{v}"), lambda v: v == 0),
    ("4. client CPU per uncontended acquisition ≤ 1.5× bare's",
     ratio("client_cpu_us_per_acq", 10000, 4), lambda v: v <= 1.5),
]


def targets():
    data = {run: rows(run) for run in RUNS}
    out = ["| target | protocol 2, round 1 | protocol 2, round 2 | protocol 3, round 1 "
           "| protocol 3, round 2 | met (protocol 3, both rounds) |",
           "|---|---|---|---|---|---|"]
    for what, f, ok in TARGETS:
        cells = [f(data[run]) for run in RUNS]
        met = all(ok(v) for v, _ in cells[2:])
        out.append(f"| {what} | " + " | ".join(s for _, s in cells)
                   + f" | {'yes' if met else '**no**'} |")
    return "\n".join(out)


def scenarios():
    """The issue's table: relaylock's Redis CPU/acq and acq/s, bare beside."""
    data = {run: rows(run) for run in RUNS}
    out = ["| scenario | Redis CPU µs/acq, p2 (bare) | p3 (bare) | acq/s, p2 (bare) | p3 (bare) "
           "| Redis core busy, p3 (bare) |",
           "|---|---|---|---|---|---|"]
    for keys, procs, hold in [(10000, 4, 0), (10000, 8, 0), (256, 4, 1), (256, 12, 1),
                              (1, 1, 1), (1, 4, 1), (1, 12, 1)]:
        cells = []
        for field, fmt in [("redis_cpu_us_per_acq", "{:.1f}"), ("acq_per_s", "{:,.0f}")]:
            for p in ("p2", "p3"):
                parts = []
                for run in (f"{p}-1", f"{p}-2"):
                    a = pick(data[run], "pubsub", keys, procs)[field]
                    b = pick(data[run], "bare:10", keys, procs)[field]
                    parts.append(f"{fmt.format(a)} ({fmt.format(b)})")
                cells.append(", ".join(parts))
        busy = []
        for run in ("p3-1", "p3-2"):
            a, b = (pick(data[run], s, keys, procs) for s in ("pubsub", "bare:10"))
            busy.append("{:.2f} ({:.2f})".format(*(r["redis_cpu_us_per_acq"] * r["acq_per_s"] / 1e6 for r in (a, b))))
        cells.append(", ".join(busy))
        out.append(f"| {keys:,} keys, {procs} × 64, hold {hold} ms | " + " | ".join(cells) + " |")
    return "\n".join(out)


def floor():
    out = ["| round | relaylock | floor:10 | bare:10 | floor / bare | relaylock / floor |",
           "|---|---|---|---|---|---|"]
    for run in ("p3-1", "p3-2"):
        rs = rows(run)
        for field, what in [("redis_cpu_us_per_acq", "Redis CPU µs/acq"),
                            ("client_cpu_us_per_acq", "client CPU µs/acq")]:
            a, f, b = (pick(rs, s, 10000, 4)[field] for s in ("pubsub", "floor:10", "bare:10"))
            out.append(f"| {run[-1]}, {what} | {a:.1f} | {f:.1f} | {b:.1f} | {f / b:.2f}× | {a / f:.2f}× |")
    return "\n".join(out)


def jain():
    out = ["| run | acquisitions | workers | Jain measured | Jain of a perfect round robin |",
           "|---|---:|---:|---:|---:|"]
    for run in RUNS:
        r = pick(rows(run), "pubsub", 1, 12)
        n = round(r["acq_per_s"] * r["duration_s"])
        w = r["workers"] * r["processes"]
        out.append(f"| {run} | {n:,} | {w} | {r['jain_fairness']:.4f} | {round_robin_jain(n, w):.4f} |")
    return "\n".join(out)


def floor256():
    """floor256.sh: target 2 with the fenced floor beside relaylock and bare."""
    out = ["| round | strategy | acq/s (× bare) | Redis CPU µs/acq (× bare) | Redis core busy "
           "| acquire calls/acq | wait p99 ms (× bare) |",
           "|---|---|---|---|---|---|---|"]
    rs = rows("floor256")
    for n in range(len(rs) // 3):
        run = rs[3 * n:3 * n + 3]
        bare = pick(run, "bare:10", 256, 4)
        for r in run:
            busy = r["redis_cpu_us_per_acq"] * r["acq_per_s"] / 1e6
            out.append(
                f"| {n + 1} | {r['strategy']} "
                f"| {r['acq_per_s']:,.0f} ({r['acq_per_s'] / bare['acq_per_s']:.2f}×) "
                f"| {r['redis_cpu_us_per_acq']:.1f} ({r['redis_cpu_us_per_acq'] / bare['redis_cpu_us_per_acq']:.2f}×) "
                f"| {busy:.2f} | {r['attempts_per_acq']:.3f} "
                f"| {r['wait_p99_ms']:.1f} ({r['wait_p99_ms'] / bare['wait_p99_ms']:.2f}×) |")
    return "\n".join(out)


print(targets(), scenarios(), floor(), jain(), floor256(), sep="\n\n")
