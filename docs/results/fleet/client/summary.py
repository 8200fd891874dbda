"""Target 4 of issue 23 from docs/results/fleet/client/run.sh's raw results:
the client's CPU per uncontended acquisition of relaylock (pubsub), the
fenced floor and the bare lock, per build and round, and relaylock's ratio
to the bare lock within each run.

    python3 docs/results/fleet/client/summary.py
"""
import glob
import json
import os

D = os.path.dirname(os.path.abspath(__file__))
print("| build | round | bare:10 µs | floor:10 µs | relaylock µs | relaylock / bare | floor / bare |")
print("|---|---:|---:|---:|---:|---:|---:|")
ratios = {}
for build in ("before", "after"):
    for path in sorted(glob.glob(os.path.join(D, f"{build}-[0-9]*.jsonl"))):
        rows = {}
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    rows[r["strategy"]] = r["client_cpu_us_per_acq"]
        bare, floor, mine = rows["bare:10"], rows["floor:10"], rows["pubsub"]
        ratios.setdefault(build, []).append(mine / bare)
        rnd = os.path.basename(path).split("-")[1].split(".")[0]
        print(f"| {build} | {rnd} | {bare:.1f} | {floor:.1f} | {mine:.1f} | {mine / bare:.2f}× | {floor / bare:.2f}× |")
print()
for build, rs in ratios.items():
    print(f"{build}: relaylock / bare {min(rs):.2f}–{max(rs):.2f}× (mean {sum(rs) / len(rs):.2f}×)  ")

print()
print("256 keys, 4 × 64, hold 1 ms:")
print()
print("| build | round | relaylock client µs | bare client µs | relaylock acq/s | bare acq/s | acq/s / bare's |")
print("|---|---:|---:|---:|---:|---:|---:|")
for build in ("before", "after"):
    for path in sorted(glob.glob(os.path.join(D, f"keys256-{build}-*.jsonl"))):
        rows = {}
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    rows[r["strategy"]] = r
        mine, bare = rows["pubsub"], rows["bare:10"]
        rnd = os.path.basename(path).rsplit("-", 1)[1].split(".")[0]
        print(
            f"| {build} | {rnd} | {mine['client_cpu_us_per_acq']:.1f} | {bare['client_cpu_us_per_acq']:.1f} "
            f"| {mine['acq_per_s']:,.0f} | {bare['acq_per_s']:,.0f} | {mine['acq_per_s'] / bare['acq_per_s']:.2f}× |"
        )
