"""The other-locks table of docs/benchmarks.md, from docs/results/other-locks.jsonl (other-locks/run.sh)."""
import json
import os

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "other-locks.jsonl")
print("| lock | acq/s | hold p50 ms | wait p99 ms | requests/acq | cmds/acq | Redis CPU µs/acq | Jain | violations |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for line in open(path):
    if not line.strip():
        continue
    r = json.loads(line)
    print(
        f"| {r['lock']} | {r['acq_per_s']:.0f} | {r['hold_p50_ms']:.2f} | {r['wait_p99_ms']:.0f} | "
        f"{r['redis_requests_per_acq']:.2f} | {r['redis_cmds_per_acq']:.2f} | {r['redis_cpu_us_per_acq']:.1f} | "
        f"{r['jain_fairness']:.3f} | {r['violations']} |"
    )
