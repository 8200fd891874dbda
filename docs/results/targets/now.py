"""Issue 23's targets on the current build (docs/results/targets/run.sh):
every round's figure, the median judged against the target; the fenced
floor beside targets 1, 2 and 4 (the cheapest lock that keeps relaylock's
fencing token, in the same runs). No figure is typed by hand.

    python3 docs/results/targets/now.py
"""
import os
import statistics
import sys

D = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(D, ".."))
import rules  # noqa: E402
from rules import jsonl, pick  # noqa: E402

ROUNDS = sorted(int(f.split("-")[1].split(".")[0]) for f in os.listdir(D) if f.startswith("uncontended-"))


def rows(name):
    return jsonl(os.path.join(D, name))


out = ["| target | by round | median | met | the fenced floor × bare, same runs |",
       "|---|---|---:|---|---|"]


def target(what, per_round, fmt, ok, floor=None):
    values = [per_round(n)[1] for n in ROUNDS]
    m = statistics.median(values)
    floor_text = ""
    if floor:
        floor_text = ", ".join(f"{floor(n):.2f}×" for n in ROUNDS)
    cells = ", ".join(fmt(v) for v in values)
    out.append(f"| {what} | {cells} | {fmt(m)} | {'yes' if ok(m) else '**no**'} | {floor_text} |")


def ratio(scenario, field, fmt, strategy="pubsub"):
    def per_round(n):
        rs = rows(f"{scenario}-{n}.jsonl")
        a, b = pick(rs, strategy), pick(rs, "bare:10")
        r = a[field] / b[field]
        return f"{fmt(a[field])} vs {fmt(b[field])} ({r:.2f}×)", r
    return per_round


def floor_ratio(scenario, field):
    return lambda n: ratio(scenario, field, str, "floor:10")(n)[1]


def times(v):
    return f"{v:.2f}×"


us = "{:.1f} µs".format
target("1. uncontended (10,000 keys, 4 × 64, hold 0): Redis CPU/acq ≤ 2.0× bare's",
       ratio("uncontended", "redis_cpu_us_per_acq", us), times, lambda r: r <= 2.0,
       floor_ratio("uncontended", "redis_cpu_us_per_acq"))
target("2. 256 keys, 4 × 64, hold 1 ms: Redis CPU/acq ≤ 1.5× bare's",
       ratio("keys256", "redis_cpu_us_per_acq", us), times, lambda r: r <= 1.5,
       floor_ratio("keys256", "redis_cpu_us_per_acq"))


def field(scenario, name, fmt, processes=None, agg=None):
    def per_round(n):
        rs = [r for r in rows(f"{scenario}-{n}.jsonl") if r["strategy"] == "pubsub"]
        if agg:
            v = agg(r[name] for r in rs)
        else:
            v = pick(rs, "pubsub", processes)[name]
        return fmt(v), v
    return per_round


target("2. 256 keys: acquire calls/acq ≤ 1.1", field("keys256", "attempts_per_acq", "{:.3f}".format),
       "{:.3f}".format, lambda v: v <= 1.1)
target("2. 256 keys: acq/s ≥ 0.8× bare's", ratio("keys256", "acq_per_s", "{:,.0f}".format), times,
       lambda r: r >= 0.8, floor_ratio("keys256", "acq_per_s"))
target("2. 256 keys: wait p99 ≤ bare's", ratio("keys256", "wait_p99_ms", "{:.1f} ms".format), times,
       lambda r: r <= 1.0)


def growth(n):
    rs = rows(f"processes-{n}.jsonl")
    a4, a12 = pick(rs, "pubsub", 4), pick(rs, "pubsub", 12)
    r = a12["redis_cpu_us_per_acq"] / a4["redis_cpu_us_per_acq"]
    return f"{a4['redis_cpu_us_per_acq']:.1f} → {a12['redis_cpu_us_per_acq']:.1f} µs ({r:.2f}×)", r


def against_bare12(n):
    rs = rows(f"processes-{n}.jsonl")
    a, b = pick(rs, "pubsub", 12), pick(rs, "bare:10", 12)
    r = a["redis_cpu_us_per_acq"] / b["redis_cpu_us_per_acq"]
    return f"{a['redis_cpu_us_per_acq']:.1f} vs {b['redis_cpu_us_per_acq']:.1f} µs ({r:.2f}×)", r


target("3. one key, 64 per process: Redis CPU/acq at 12 processes ≤ 1.2× that at 4", growth, times,
       lambda r: r <= 1.2)
target("3. one key: at 12 processes ≤ 0.5× bare's", against_bare12, times, lambda r: r <= 0.5)
target("3. one key, 1 / 4 / 12 processes: requests/acq ≤ 2.0 (the most of the three)",
       field("processes", "redis_requests_per_acq", "{:.3f}".format, agg=max), "{:.3f}".format,
       lambda v: v <= 2.0)
target("3. one key: acquire calls/acq ≤ 1.0 (the most of the three)",
       field("processes", "attempts_per_acq", "{:.3f}".format, agg=max), "{:.3f}".format,
       lambda v: v <= 1.0)
target("3. one key: Jain ≥ 0.99 (the least of the three)",
       field("processes", "jain_fairness", "{:.3f}".format, agg=min), "{:.3f}".format,
       lambda v: v >= 0.99)
target("3. one key: violations (all runs)", field("processes", "violations", str, agg=max),
       lambda v: str(int(v)), lambda v: v == 0)
target("4. client CPU per uncontended acquisition ≤ 1.5× bare's",
       ratio("uncontended", "client_cpu_us_per_acq", us), times, lambda r: r <= 1.5,
       floor_ratio("uncontended", "client_cpu_us_per_acq"))
# Target 5: the targets met before stay met (the rules of docs/results/rules.py).
# Its rows go into the same table: one measurement each, in the "by round" column.
def kept_target(what, measured, ok):
    out.append(f"| 5. {what} | {measured} |  | {'yes' if ok else '**no**'} |  |")


sweep = rows("kept-sweep.jsonl")
rules.contended(kept_target, "1 key, 256 workers, hold 1 ms", next(r for r in sweep if r["workers"] == 256))
four = rows("kept-processes.jsonl")[0]
rules.contended(kept_target, "4 processes × 64 workers", four)
xs = [(r["handoff_p50_ms"] / r["rtt_p50_ms"], r["workers"]) for r in sweep]
kept_target("hand-over p50 within one process ≤ 2× PING RTT", ", ".join(f"{x:.1f}× ({w})" for x, w in xs),
            max(x for x, _ in xs) <= 2.0)
print("\n".join(out))
