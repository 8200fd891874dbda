"""The release ring's size against the Redis CPU of a contended hand-over:
the rows of docs/results/ring/ring.jsonl (two runs of each build, back to
back, on one server each; see README.md) as a markdown table.

    python3 docs/results/ring/table.py
"""
import json
import os

D = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(D, "ring.jsonl")) as f:
    rows = [json.loads(l) for l in f if l.strip()]
print("| run | ring (fences) | acq/s | requests/acq | cmds/acq | Redis CPU µs/acq | handoff p50 ms | rtt p50 ms |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for i, r in enumerate(rows):
    print(
        f"| {i // 2 + 1} | {r['ring']} | {r['acq_per_s']:,.0f} | {r['redis_requests_per_acq']:.3f} | "
        f"{r['redis_cmds_per_acq']:.2f} | {r['redis_cpu_us_per_acq']:.1f} | {r['handoff_p50_ms']:.3f} | {r['rtt_p50_ms']:.3f} |"
    )
