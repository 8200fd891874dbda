"""Redis CPU per lock+release pair with the RELEASE script of another
revision beside the current one, measured on the server side only, as
script_cost.py measures (pipelined batches of 64 pairs, random keys of
10,000; both use the current ACQUIRE). Each side first runs 3 warm-up rounds
so that the keys carry rings.

    docs/results/other-locks/.venv/bin/python docs/results/other-locks/release_cost.py 490d2f5^

Prints a markdown table (5 runs, alternating).
"""
import re
import statistics
import subprocess
import sys

from redis_harness import BATCH, ROOT, ROUNDS, lua, redis_server, runs

rev = sys.argv[1]
old_src = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:src/scripts.rs"], check=True, capture_output=True, text=True).stdout
old_release = re.search(r'pub const RELEASE: &str = r#"(.*?)"#;', old_src, re.S).group(1)

with redis_server() as (r, cpu):
    ACQ = r.script_load(lua("ACQUIRE"))

    def case(prefix, release):
        sha = r.script_load(release)

        def name(k):
            return f"{prefix}:2:{{{k}}}"

        return (
            lambda p, k, t: p.evalsha(ACQ, 3, name(k), f"{name(k)}:void:{t}", f"{name(k)}:void", t, 30000, "", f"{name(k)}:ch", "PUBLISH"),
            lambda p, k, t, a: p.evalsha(sha, 3, name(k), f"{name(k)}:void:{t}", f"{name(k)}:void", t, a[1], f"{name(k)}:ch", 60000, 544, "c", 50, "PUBLISH", "0"),
        )

    cases = {f"RELEASE of {rev}": case("o", old_release), "RELEASE now": case("n", lua("RELEASE"))}
    runs(r, cpu, cases, 3)  # warm-up: the keys carry rings
    results = runs(r, cpu, cases, 5)
    print(f"redis-server {r.info('server')['redis_version']}, {BATCH} pairs per pipelined batch, {ROUNDS} batches, 5 runs each, current ACQUIRE")
    print()
    print("| release script | Redis CPU µs per pair (5 runs) | median |")
    print("|---|---|---:|")
    for label, v in results.items():
        print(f"| {label} | {', '.join(f'{x:.2f}' for x in v)} | {statistics.median(v):.2f} |")
