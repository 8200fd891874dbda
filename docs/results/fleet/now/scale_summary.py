"""scale.sh's rounds on the 16-core machine: targets 1, 2, 3 and 4 of issue
   23, each ratio within one bench run, the build before (efe9f14) and the
   current one, round by round.
   python3 docs/results/fleet/now/scale_summary.py [folder, default scale]"""
import os
import sys

D = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(D, "..", ".."))
from rules import jsonl, pick  # noqa: E402

F = os.path.join(D, sys.argv[1] if len(sys.argv) > 1 else "scale")


def scenario(rows, keys, processes=None):
    return [r for r in rows if r["keys"] == keys and (processes is None or r["processes"] == processes)]


print("| build, round | T1 Redis CPU × bare | T4 client CPU × bare | T4 floor × bare | T2 Redis CPU × bare "
      "| T2 acq/s × bare | T2 wait p99 × bare | T2 acquire calls | T3 12 / 4 processes | T3 at 12 × bare |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for b, n in (("before", 1), ("after", 1), ("after", 2), ("before", 2)):
    rows = jsonl(os.path.join(F, f"{b}-{n}.jsonl"))
    u, k, one = scenario(rows, 10000), scenario(rows, 256), scenario(rows, 1)

    def x(rs, field, s="pubsub"):
        return pick(rs, s)[field] / pick(rs, "bare:10")[field]

    p4, p12 = pick(one, "pubsub", 4), pick(one, "pubsub", 12)
    print(f"| {b} {n} | {x(u, 'redis_cpu_us_per_acq'):.2f}× | {x(u, 'client_cpu_us_per_acq'):.2f}× "
          f"| {x(u, 'client_cpu_us_per_acq', 'floor:10'):.2f}× | {x(k, 'redis_cpu_us_per_acq'):.2f}× "
          f"| {x(k, 'acq_per_s'):.2f}× | {x(k, 'wait_p99_ms'):.2f}× | {pick(k, 'pubsub')['attempts_per_acq']:.3f} "
          f"| {p12['redis_cpu_us_per_acq'] / p4['redis_cpu_us_per_acq']:.2f}× "
          f"| {p12['redis_cpu_us_per_acq'] / pick(one, 'bare:10', 12)['redis_cpu_us_per_acq']:.2f}× |")
