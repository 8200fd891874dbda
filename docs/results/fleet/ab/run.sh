#!/usr/bin/env bash
# Protocol 2 (the commit before protocol 3, 96a3fbe) against protocol 3, the
# same fleet scenarios back to back on this machine, each run with the bare
# lock beside it (ratios within one run). Build the two binaries first:
#
#   git worktree add /tmp/p2 96a3fbe && (cd /tmp/p2 && cargo build --release -p relaylock-cli)
#   cp /tmp/p2/target/release/relaylock /tmp/relaylock-p2
#   cargo build --release -p relaylock-cli && cp target/release/relaylock /tmp/relaylock-p3
#   docs/results/fleet/ab/run.sh            (ONLY=p3 docs/results/fleet/ab/run.sh: protocol 3 alone)
#
# Writes docs/results/fleet/ab/{p2,p3}-{uncontended,keys256,processes}.jsonl.
set -euo pipefail
cd "$(dirname "$0")"
for p in ${ONLY:-p2 p3}; do
  R=/tmp/relaylock-$p
  $R bench --keys 10000 --workers 64 --processes 4 --hold-ms 0 --no-rtt --strategy pubsub \
    --strategy bare:10 --duration 8s --json 2>/dev/null > $p-uncontended.jsonl
  $R bench --keys 256 --workers 64 --processes 4 --hold-ms 1 --no-rtt --strategy pubsub \
    --strategy bare:10 --duration 8s --json 2>/dev/null > $p-keys256.jsonl
  $R bench --sweep processes=1,4,12 --workers 64 --keys 1 --hold-ms 1 --no-rtt --strategy pubsub \
    --strategy bare:10 --duration 6s --json 2>/dev/null > $p-processes.jsonl
done
