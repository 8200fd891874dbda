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


def runs(pattern):
    """(round, {strategy: row}) of each raw result file matching `pattern`."""
    for path in sorted(glob.glob(os.path.join(D, pattern))):
        rows = {}
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    rows[r["strategy"]] = r
        yield os.path.basename(path).rsplit("-", 1)[1].split(".")[0], rows


print("| build | round | bare:10 µs | floor:10 µs | relaylock µs | relaylock / bare | floor / bare |")
print("|---|---:|---:|---:|---:|---:|---:|")
ratios = {}
for build in ("before", "after"):
    for rnd, rows in runs(f"{build}-[0-9]*.jsonl"):
        bare, floor, mine = (rows[s]["client_cpu_us_per_acq"] for s in ("bare:10", "floor:10", "pubsub"))
        ratios.setdefault(build, []).append(mine / bare)
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
    for rnd, rows in runs(f"keys256-{build}-*.jsonl"):
        mine, bare = rows["pubsub"], rows["bare:10"]
        print(
            f"| {build} | {rnd} | {mine['client_cpu_us_per_acq']:.1f} | {bare['client_cpu_us_per_acq']:.1f} "
            f"| {mine['acq_per_s']:,.0f} | {bare['acq_per_s']:,.0f} | {mine['acq_per_s'] / bare['acq_per_s']:.2f}× |"
        )
