"""Protocol 4's targets (docs/results/targets/run.sh): for each target, the
figure of every round and their median, for protocol 3's build (p3/, the
"before") and this one (p4/); a target is judged on protocol 4's median of
the within-run ratios. No figure is typed by hand.

    python3 docs/results/targets/now.py
"""
import os
import statistics
import sys

D = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(D, ".."))
from rules import jsonl, pick  # noqa: E402


def rounds(build):
    d = os.path.join(D, build)
    if not os.path.isdir(d):
        return []
    return sorted(int(f.split("-")[1].split(".")[0]) for f in os.listdir(d) if f.startswith("uncontended-"))


def rows(build, name):
    return jsonl(os.path.join(D, build, name))


out = ["| target | protocol 3 (before), by round | median | protocol 4, by round | median | met |",
       "|---|---|---:|---|---:|---|"]


def target(what, per_round, fmt, ok):
    cells, medians = [], []
    for build in ("p3", "p4"):
        values = []
        for n in rounds(build):
            try:
                values.append(per_round(build, n))
            except (KeyError, TypeError, ZeroDivisionError):
                pass
        medians.append(statistics.median(values) if values else None)
        cells.append(", ".join(fmt(v) for v in values) if values else "-")
    m3, m4 = medians
    met = "-" if m4 is None or ok is None else ("yes" if ok(m4) else "**no**")
    show = lambda m: "-" if m is None else fmt(m)  # noqa: E731
    out.append(f"| {what} | {cells[0]} | {show(m3)} | {cells[1]} | {show(m4)} | {met} |")


def ratio(scenario, field, processes=None):
    def per_round(build, n):
        rs = rows(build, f"{scenario}-{n}.jsonl")
        a, b = pick(rs, "pubsub", processes), pick(rs, "bare:10", processes)
        return a[field] / b[field]
    return per_round


def value(scenario, field, agg, strategy="pubsub"):
    def per_round(build, n):
        rs = [r for r in rows(build, f"{scenario}-{n}.jsonl") if r["strategy"] == strategy]
        return agg(r[field] for r in rs)
    return per_round


def growth(build, n):
    rs = rows(build, f"processes-{n}.jsonl")
    return pick(rs, "pubsub", 12)["redis_cpu_us_per_acq"] / pick(rs, "pubsub", 4)["redis_cpu_us_per_acq"]


times = "{:.2f}×".format
target("1. uncontended (10,000 keys, 4 × 64, hold 0): Redis user CPU/acq ≤ 2.0× bare's",
       ratio("uncontended", "redis_user_us_per_acq"), times, lambda r: r <= 2.0)
target("1. uncontended: Redis CPU/acq (user + system) ≤ 2.0× bare's",
       ratio("uncontended", "redis_cpu_us_per_acq"), times, lambda r: r <= 2.0)
target("1. uncontended: client CPU/acq ≤ 1.5× bare's",
       ratio("uncontended", "client_cpu_us_per_acq"), times, lambda r: r <= 1.5)
target("2. 256 keys, 4 × 64, hold 1 ms: Redis CPU/acq ≤ 2.0× bare's",
       ratio("keys256", "redis_cpu_us_per_acq"), times, lambda r: r <= 2.0)
target("2. 256 keys: Redis user CPU/acq, × bare's (no target; shown beside)",
       ratio("keys256", "redis_user_us_per_acq"), times, None)
target("2. 256 keys: acq/s ≥ 0.9× bare's", ratio("keys256", "acq_per_s"), times, lambda r: r >= 0.9)
target("2. 256 keys: wait p99 ≤ bare's", ratio("keys256", "wait_p99_ms"), times, lambda r: r <= 1.0)
target("3. one key, 64 per process: Redis CPU/acq at 12 processes ≤ 1.2× that at 4", growth, times,
       lambda r: r <= 1.2)
target("3. one key: at 12 processes ≤ 0.5× bare's", ratio("processes", "redis_cpu_us_per_acq", 12), times,
       lambda r: r <= 0.5)
target("3. one key, 4 / 12 processes: requests/acq ≤ 2.05 (the more of the two)",
       value("processes", "redis_requests_per_acq", max), "{:.3f}".format, lambda v: v <= 2.05)
target("3. one key: Jain ≥ 0.99 (the less of the two)", value("processes", "jain_fairness", min),
       "{:.3f}".format, lambda v: v >= 0.99)
target("3. one key: violations (all runs)", value("processes", "violations", max),
       lambda v: str(int(v)), lambda v: v == 0)


def entities(field):
    def per_round(build, n):
        if n != 1:
            raise KeyError(n)
        return pick(rows(build, "entities.jsonl"), "pubsub")[field]
    return per_round


target("4. per-entity (1,000,000 keys, 2 × 64, hold 0, 7 s): Redis memory per key left ≤ 100 B",
       entities("retained_bytes_per_key"), "{:.0f} B".format, lambda v: v <= 100)
target("4. per-entity: keys left at the end of the run (records or tombstones, kept 60 s)",
       entities("retained_keys"), lambda v: f"{int(v):,}", None)
print("\n".join(out))
