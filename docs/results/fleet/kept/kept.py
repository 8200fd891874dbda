"""Target 5 of issue 23 (the targets already met stay met) on protocol 3,
from docs/results/fleet/kept/*.jsonl (run.sh beside this file); the same
rules as docs/results/targets.py.

    python3 docs/results/fleet/kept/kept.py
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import rules  # noqa: E402

D = os.path.dirname(os.path.abspath(__file__))
R = os.path.join(D, "..", "..")


def rows(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


out = []


def target(what, measured, ok):
    out.append(f"| {what} | {measured} | {'yes' if ok else '**no**'} |")


def contended(label, r):
    rules.contended(target, label, r)


sweep = rows(os.path.join(D, "sweep.jsonl"))
contended("1 key, 256 workers, hold 1 ms", next(r for r in sweep if r["workers"] == 256))
four = rows(os.path.join(D, "processes.jsonl"))[0]
contended("4 processes × 64 workers", four)
ratios = [(r["handoff_p50_ms"] / r["rtt_p50_ms"], r["workers"]) for r in sweep]
target(
    "hand-over p50 within one process ≤ 2× PING RTT",
    ", ".join(f"{x:.1f}× ({w})" for x, w in ratios),
    max(x for x, _ in ratios) <= 2.0,
)
old = next(r for r in rows(os.path.join(R, "protocol-1", "processes.jsonl")) if r["strategy"] == "pubsub")
new_x, old_x = four["handoff_p50_ms"] / four["rtt_p50_ms"], old["handoff_p50_ms"] / old["rtt_p50_ms"]
target(
    "hand-over across processes unchanged or better",
    f"{four['handoff_p50_ms']:.3f} ms = {new_x:.1f}× RTT (protocol 1: {old['handoff_p50_ms']:.3f} ms = {old_x:.1f}×)",
    new_x <= old_x * 1.1,
)
print("| target (kept) | measured on protocol 3 | met |")
print("|---|---|---|")
print("\n".join(out))
