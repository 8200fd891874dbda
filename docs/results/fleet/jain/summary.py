"""The 20 s fairness runs of run.sh beside this file, one line each.

    python3 docs/results/fleet/jain/summary.py > docs/results/fleet/jain/summary.txt
"""
import json
import os

D = os.path.dirname(os.path.abspath(__file__))
print("```text")
print("run    acquisitions   Jain    Redis CPU us/acq  requests/acq  acquire calls/acq  violations")
for name in sorted(f for f in os.listdir(D) if f.endswith(".jsonl")):
    with open(os.path.join(D, name)) as f:
        r = json.loads(f.readline())
    print(
        f"{name[:-6]:<6} {r['acquisitions']:>12}   {r['jain_fairness']:.4f}  {r['redis_cpu_us_per_acq']:>16.1f}"
        f"  {r['redis_requests_per_acq']:>12.3f}  {r['attempts_per_acq']:>17.4f}  {r['violations']:>10}"
    )
print("```")
