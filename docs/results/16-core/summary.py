#!/usr/bin/env python3
"""The 16-core table of docs/benchmarks.md, from round-*.jsonl beside this
file (run.sh's output: redis-server pinned to core 0, the bench on cores
1-15, 6 s per strategy, the bare lock and the fenced floor in every run).
Every ratio is within one run.

    python3 docs/results/16-core/summary.py
"""
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
rounds = sorted(f for f in os.listdir(here) if f.startswith("round-") and f.endswith(".jsonl"))
scenarios = [((10000, 4, 0.0), "10,000 keys, 4 × 64, hold 0"),
             ((256, 4, 1.0), "256 keys, 4 × 64, hold 1 ms"),
             ((256, 12, 1.0), "256 keys, 12 × 64, hold 1 ms")]
print("| scenario | round | relaylock acq/s (× bare) | Redis CPU µs/acq: relaylock / floor / bare "
      "| relaylock × bare | floor × bare | client CPU µs/acq: relaylock (× bare) | Redis core busy, relaylock |")
print("|---|---:|---:|---|---:|---:|---:|---:|")
for key, name in scenarios:
    for f in rounds:
        runs = {}
        for line in open(os.path.join(here, f)):
            r = json.loads(line)
            if (r["keys"], r["processes"], r["hold_ms"]) == key:
                runs[r["strategy"]] = r
        p, b, fl = runs["pubsub"], runs["bare:10"], runs.get("floor:10")
        cpu = lambda r: r["redis_cpu_us_per_acq"]
        floor_cpu = f"{cpu(fl):.1f}" if fl else "-"
        floor_x = f"{cpu(fl) / cpu(b):.2f}×" if fl else "-"
        busy = cpu(p) * p["acq_per_s"] / 1e6
        print(f"| {name} | {f[6:-6]} | {p['acq_per_s']:,.0f} ({p['acq_per_s'] / b['acq_per_s']:.2f}×) "
              f"| {cpu(p):.1f} / {floor_cpu} / {cpu(b):.1f} | {cpu(p) / cpu(b):.2f}× | {floor_x} "
              f"| {p['client_cpu_us_per_acq']:.1f} ({p['client_cpu_us_per_acq'] / b['client_cpu_us_per_acq']:.2f}×) "
              f"| {busy:.2f} |")
