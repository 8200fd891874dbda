"""Where the client's CPU goes per uncontended acquisition on the 16-core
device machine: the samples of the bench's worker threads in
docs/results/fleet/scale/perf/perf-*.data (profile.sh), by library and, in the
relaylock binary, by the crate or subsystem a symbol belongs to, in µs per
acquisition (samples / 999 Hz / acquisitions in the 3 s window).

perf reads relaylock's symbols from the path the run recorded,
target/scale/bin/relaylock, which prepare.sh strips: put the unstripped
target/release/relaylock of the same build there first (same build id), then

    python3 docs/results/fleet/scale/profile_summary.py > docs/results/fleet/scale/perf/summary.txt

libc's symbols stay unresolved (the device machine's libc is another build):
malloc, free and memmove are the bulk of that row.
"""
import collections
import json
import os
import re
import subprocess

D = os.path.join(os.path.dirname(os.path.abspath(__file__)), "perf")
# First match wins: a symbol's crate or subsystem.
GROUPS = [
    ("metrics (the Prometheus recorder)", r"metrics"),
    ("tokio timers", r"tokio::runtime::time|tokio::time"),
    ("tokio scheduler", r"tokio::runtime|tokio::task"),
    ("tokio sync, futures", r"tokio::sync|tokio_util|futures"),
    ("fred, RESP encoding", r"fred::|redis_protocol"),
    ("bytes", r"^bytes::"),
    ("dashmap", r"dashmap"),
    ("std locks", r"std::sys::sync|parking_lot"),
    ("hashing", r"hash|Hasher"),
    ("relaylock library", r"relaylock::(?!worker|bare|bench|stats)"),
    ("the bench's own loop", r"relaylock::(worker|bare|bench|stats)"),
]
LINE = re.compile(r"\s+[\d.]+%\s+(\d+)\s+(\S+)\s+\[.\]\s+(.*)")


def group(dso, sym):
    if dso != "relaylock":
        return dso
    return next((name for name, rx in GROUPS if re.search(rx, sym)), "other Rust (inlined futures, drops)")


def main():
    print("```text")
    with open(os.path.join(D, "bench.jsonl")) as f:
        bench = {json.loads(l)["strategy"].split(":")[0]: json.loads(l) for l in f if l.strip()}
    table = {}
    for s in ("pubsub", "floor", "bare"):
        out = subprocess.run(
            ["perf", "report", "-i", os.path.join(D, f"perf-{s}.data"), "--stdio", "-n",
             "--comm", "tokio-rt-worker", "--sort", "dso,sym"],
            capture_output=True, text=True, check=True).stdout
        acq = bench[s]["acq_per_s"] * 3
        us = collections.Counter()
        for line in out.splitlines():
            m = LINE.match(line)
            if m:
                us[group(m[2], m[3].strip())] += int(m[1]) / 999 / acq * 1e6
        table[s] = us
    rows = sorted(set().union(*table.values()), key=lambda g: -table["pubsub"][g])
    print(f"{'µs per acquisition':38} {'relaylock':>9} {'floor:10':>9} {'bare:10':>9}")
    for g in rows:
        if max(t[g] for t in table.values()) >= 0.3:
            print(f"{g:38} " + " ".join(f"{table[s][g]:9.2f}" for s in table))
    print(f"{'sampled, all of the above and the rest':38} "
          + " ".join(f"{sum(table[s].values()):9.1f}" for s in table))
    print(f"{'client CPU/acq, the bench (getrusage)':38} "
          + " ".join(f"{bench[s]['client_cpu_us_per_acq']:9.1f}" for s in table))
    print("```")


main()
