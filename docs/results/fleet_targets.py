"""The targets table of issue 23 (fleet cost, protocol 3) in docs/benchmarks.md,
computed from the raw results of docs/results/fleet/ab/run.sh (protocol 2, the
commit before protocol 3, and protocol 3, each scenario run with the bare lock
beside it), so no figure in it is typed by hand. Every ratio is within one run.

    python3 docs/results/fleet_targets.py
"""
import os

from rules import jsonl, pick

D = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fleet", "ab")


def rows(name):
    return jsonl(os.path.join(D, name))


def yes(ok):
    return "yes" if ok else "**no**"


out = [
    "| target | protocol 2 | protocol 3 | met |",
    "|---|---|---|---|",
]


def target(what, f, ok):
    before, after = f("p2"), f("p3")
    out.append(f"| {what} | {before[0]} | {after[0]} | {yes(ok(after[1]))} |")


def cpu_ratio(p, scenario):
    rs = rows(f"{p}-{scenario}.jsonl")
    a, b = pick(rs, "pubsub"), pick(rs, "bare:10")
    r = a["redis_cpu_us_per_acq"] / b["redis_cpu_us_per_acq"]
    return f"{a['redis_cpu_us_per_acq']:.1f} vs {b['redis_cpu_us_per_acq']:.1f} µs ({r:.2f}×)", r


def field_ratio(p, scenario, field, fmt):
    rs = rows(f"{p}-{scenario}.jsonl")
    a, b = pick(rs, "pubsub"), pick(rs, "bare:10")
    r = a[field] / b[field]
    return f"{fmt(a[field])} vs {fmt(b[field])} ({r:.2f}×)", r


def field(p, scenario, name, fmt, processes=None):
    v = pick(rows(f"{p}-{scenario}.jsonl"), "pubsub", processes)[name]
    return fmt(v), v


target("1. uncontended (10,000 keys, 4 × 64, hold 0): Redis CPU/acq ≤ 2.0× bare's",
       lambda p: cpu_ratio(p, "uncontended"), lambda r: r <= 2.0)
target("2. 256 keys, 4 × 64, hold 1 ms: Redis CPU/acq ≤ 1.5× bare's",
       lambda p: cpu_ratio(p, "keys256"), lambda r: r <= 1.5)
target("2. 256 keys: acquire calls/acq ≤ 1.1",
       lambda p: field(p, "keys256", "attempts_per_acq", lambda v: f"{v:.3f}"), lambda v: v <= 1.1)
target("2. 256 keys: acq/s ≥ 0.8× bare's",
       lambda p: field_ratio(p, "keys256", "acq_per_s", lambda v: f"{v:,.0f}"), lambda r: r >= 0.8)
target("2. 256 keys: wait p99 ≤ bare's",
       lambda p: field_ratio(p, "keys256", "wait_p99_ms", lambda v: f"{v:.1f} ms"), lambda r: r <= 1.0)


def sweep(p):
    return rows(f"{p}-processes.jsonl")


def growth(p):
    rs = sweep(p)
    a4, a12 = pick(rs, "pubsub", 4), pick(rs, "pubsub", 12)
    r = a12["redis_cpu_us_per_acq"] / a4["redis_cpu_us_per_acq"]
    return f"{a4['redis_cpu_us_per_acq']:.1f} → {a12['redis_cpu_us_per_acq']:.1f} µs ({r:.2f}×)", r


def against_bare12(p):
    rs = sweep(p)
    a, b = pick(rs, "pubsub", 12), pick(rs, "bare:10", 12)
    r = a["redis_cpu_us_per_acq"] / b["redis_cpu_us_per_acq"]
    return f"{a['redis_cpu_us_per_acq']:.1f} vs {b['redis_cpu_us_per_acq']:.1f} µs ({r:.2f}×)", r


def worst(p, name, fmt, agg):
    rs = [r for r in sweep(p) if r["strategy"] == "pubsub"]
    v = agg(r[name] for r in rs)
    return fmt(v), v


target("3. one key, 64 per process: Redis CPU/acq at 12 processes ≤ 1.2× that at 4",
       growth, lambda r: r <= 1.2)
target("3. one key: at 12 processes ≤ 0.5× bare's", against_bare12, lambda r: r <= 0.5)
target("3. one key, 1 / 4 / 12 processes: requests/acq ≤ 2.0 (the most of the three)",
       lambda p: worst(p, "redis_requests_per_acq", lambda v: f"{v:.2f}", max), lambda v: v <= 2.0)
target("3. one key: acquire calls/acq ≤ 1.0 (the most of the three)",
       lambda p: worst(p, "attempts_per_acq", lambda v: f"{v:.3f}", max), lambda v: v <= 1.0)
target("3. one key: Jain ≥ 0.99 (the least of the three)",
       lambda p: worst(p, "jain_fairness", lambda v: f"{v:.3f}", min), lambda v: v >= 0.99)
target("3. one key: violations (all runs)",
       lambda p: worst(p, "violations", lambda v: f"{v}", max), lambda v: v == 0)
target("4. client CPU per uncontended acquisition ≤ 1.5× bare's",
       lambda p: field_ratio(p, "uncontended", "client_cpu_us_per_acq", lambda v: f"{v:.1f} µs"),
       lambda r: r <= 1.5)

print("\n".join(out))
