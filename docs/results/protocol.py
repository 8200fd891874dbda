"""Protocol 1 against protocol 2, per scenario, from the raw results:
docs/results/protocol-1/ (protocol 1, measured earlier: the bare baseline of
issue 12 and the last benchmark run before it) and docs/results/ (this run).
Different sessions: read the ratios to bare, measured within one run, as
the comparable figures."""
import json
import os
import statistics

D = os.path.dirname(os.path.abspath(__file__))


def rows(name):
    with open(os.path.join(D, name)) as f:
        return [json.loads(l) for l in f if l.strip()]


def pick(rs, strategy, **kw):
    out = [r for r in rs if r["strategy"] == strategy and all(r[k] == v for k, v in kw.items())]
    return out


def med(rs, field):
    return statistics.median(r[field] for r in rs)


print("| scenario | protocol | Redis cmds/acq | requests/acq | Redis CPU µs/acq | × bare's CPU (same run) | acq/s | × bare's acq/s (same run) |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for label, old_file, new_file, kw in [
    ("uncontended: 10,000 keys, 64 workers, hold 0", "protocol-1/uncontended.jsonl", "uncontended.jsonl", {}),
    ("contended: 1 key, 256 workers, hold 1 ms", "protocol-1/contended.jsonl", "sweep.jsonl", {"workers": 256}),
]:
    for proto, f in (("1", old_file), ("2", new_file)):
        rs = rows(f)
        p, b = pick(rs, "pubsub", **kw), pick(rs, "bare:10", **kw)
        cpu_x = med(p, "redis_cpu_us_per_acq") / med(b, "redis_cpu_us_per_acq")
        thr_x = med(p, "acq_per_s") / med(b, "acq_per_s")
        print(
            f"| {label} | {proto} | {med(p, 'redis_cmds_per_acq'):.2f} | {med(p, 'redis_requests_per_acq'):.2f} | "
            f"{med(p, 'redis_cpu_us_per_acq'):.1f} | {cpu_x:.2f} | {med(p, 'acq_per_s'):,.0f} | {thr_x:.2f} |"
        )
for proto, f in (("1", "protocol-1/processes.jsonl"), ("2", "processes.jsonl")):
    p = pick(rows(f), "pubsub")
    print(
        f"| 4 processes × 64 workers, 1 key, hold 1 ms | {proto} | {med(p, 'redis_cmds_per_acq'):.2f} | "
        f"{med(p, 'redis_requests_per_acq'):.2f} | {med(p, 'redis_cpu_us_per_acq'):.1f} | | {med(p, 'acq_per_s'):,.0f} | |"
    )
