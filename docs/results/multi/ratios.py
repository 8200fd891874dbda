"""The multi-key lock's targets from the saved runs of docs/results/multi/run.sh
(printed as a markdown table by docs/results/render.sh)."""
import json
import os

D = os.path.dirname(os.path.abspath(__file__))


def rows(name):
    with open(os.path.join(D, name)) as f:
        return [json.loads(line) for line in f if line.strip()]


def by_strategy(name):
    return {r["strategy"]: r for r in rows(name)}


big = rows("ten-thousand.jsonl")[0]
sets = by_strategy("sets.jsonl")
single = by_strategy("single.jsonl")["pubsub"]
multi = sets["pubsub x2-8"]
per_set_ms = 10_000 / big["acq_per_s"] * 1e3
print("| target | measured | met |")
print("|---|---:|---|")
print(f"| 1. requests per key, sets of 10,000 keys (take + release: 2 / 10,000 = 0.0002) | {big['redis_requests_per_acq']:.4f} | {'yes' if big['redis_requests_per_acq'] <= 0.00021 else 'no'} |")
print(f"| 1. one set of 10,000 keys taken and released, ms (< 100) | {per_set_ms:.0f} | {'yes' if per_set_ms < 100 else 'no'} |")
print(f"| 2. violations (0) | {multi['violations']} | {'yes' if multi['violations'] == 0 else 'no'} |")
print(f"| 2. longest wait, ms (a stall is a wait past the 30 s lease) | {multi['wait_max_ms']:.0f} | {'yes' if multi['wait_max_ms'] < 30_000 else 'no'} |")
ratio = multi["redis_cpu_us_per_acq"] / single["redis_cpu_us_per_acq"]
print(f"| 2. Redis CPU per key acquired against a single-key acquisition ({multi['redis_cpu_us_per_acq']:.1f} / {single['redis_cpu_us_per_acq']:.1f} us; <= 2x) | {ratio:.2f}x | {'yes' if ratio <= 2 else 'no'} |")
for s in ("onebyone:10 x2-8", "bare:10 x2-8"):
    r = sets[s]
    extra = f", {r['restarts']} restarts" if r.get("restarts") is not None else ""
    print(f"| (against) {s}: keys/s, Redis CPU us per key | {r['acq_per_s']:.0f}, {r['redis_cpu_us_per_acq']:.1f}{extra} | |")
print(f"| (this) pubsub x2-8: keys/s | {multi['acq_per_s']:.0f} | |")
