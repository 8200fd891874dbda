#!/usr/bin/env bash
# Target 4 (the client's CPU per uncontended acquisition) after the client-side
# work of this stop, on the 2-core machine: the build before (2a59ea6) against
# the build after, alternating, five rounds; each bench starts a redis-server
# of its own. Uncontended: 10,000 keys, 4 x 64 workers, hold 0, the bare lock
# and the fenced floor beside relaylock; target 2 (256 keys, 4 x 64, hold 1 ms)
# beside, to show it did not move. 6 s per strategy: lean/run.sh's runs, five
# rounds, written here. Build the binaries first:
#
#   git worktree add /tmp/before 2a59ea6 && (cd /tmp/before && CARGO_TARGET_DIR=/work/main/target/before cargo build --release -p relaylock-cli)
#   cp target/before/release/relaylock /tmp/relaylock-before
#   cargo build --release -p relaylock-cli && cp target/release/relaylock /tmp/relaylock-after
#   docs/results/fleet/client-cpu/run.sh && python3 docs/results/fleet/client-cpu/summary.py
#
# Writes docs/results/fleet/client-cpu/two-core/{uncontended,keys256}-{before,after}-<round>.jsonl.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROUNDS=5 OUT="$here/two-core" exec "$here/../lean/run.sh"
