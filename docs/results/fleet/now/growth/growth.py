"""growth/run.sh's rounds: Redis CPU per acquisition at 4 and 12 processes,
   and their ratio (target 3: at most 1.2).
   python3 docs/results/fleet/now/growth/growth.py"""
import json
import os

D = os.path.dirname(os.path.abspath(__file__))
print("| build | round | Redis CPU µs/acq, 4 processes | 12 processes | growth | requests/acq at 12 |")
print("|---|---:|---:|---:|---:|---:|")
for r in (1, 2):
    for b, label in (("p3", "13442eb"), ("final", "current")):
        rows = {x["processes"]: x for x in map(json.loads, open(os.path.join(D, f"{b}-{r}.jsonl")))}
        a, c = rows[4]["redis_cpu_us_per_acq"], rows[12]["redis_cpu_us_per_acq"]
        print(f"| {label} | {r} | {a:.1f} | {c:.1f} | {c / a:.2f}× | {rows[12]['redis_requests_per_acq']:.3f} |")
