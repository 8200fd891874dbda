"""Rules of the targets table (targets/now.py), and how it reads the bench's rows."""
import json


def contended(target, label, r):
    """The contended-lock targets of one bench row, through `target(what, measured, ok)`."""
    target(f"{label}: commands/acq ≤ 10", f"{r['redis_cmds_per_acq']:.2f}", r["redis_cmds_per_acq"] <= 10)
    target(
        f"{label}: ≤ 1.0 attempts and ≤ 2.0 requests per acq",
        f"{r['attempts_per_acq']:.3f} and {r['redis_requests_per_acq']:.3f}",
        r["attempts_per_acq"] <= 1.01 and r["redis_requests_per_acq"] <= 2.02,
    )
    target(
        f"{label}: Jain ≥ 0.99, 0 violations",
        f"{r['jain_fairness']:.3f}, {r['violations']}",
        r["jain_fairness"] >= 0.99 and r["violations"] == 0,
    )


def jsonl(path):
    """The rows of a bench's `--json` output."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def pick(rs, strategy, processes=None):
    """The row of `strategy` (and of `processes`, if given) among `rs`."""
    for r in rs:
        if r["strategy"] == strategy and (processes is None or r["processes"] == processes):
            return r
    raise KeyError((strategy, processes))
