#!/usr/bin/env bash
# Three open-source Redis lock libraries and relaylock under the same
# contended load, against one redis-server, one after the other. Prints one
# JSON line per run on stdout (everything else goes to stderr). See README.md.
#
#   other-locks/run.sh > docs/results/other-locks.jsonl
#
# REDIS_URL=redis://host:port  use that server instead of starting one
# RELAYLOCK=/path/to/relaylock  default: <repo>/target/release/relaylock
set -euo pipefail

# The scenario (fixed): 1 key, 256 workers in one process, hold 1 ms, 6 s, lease 10 s.
WORKERS=256
HOLD_MS=1
DURATION_S=6
LEASE_S=10

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$here"
log() { echo "run.sh: $*" >&2; }

# --- install what is missing (all of it under this folder, gitignored) ---
if [ ! -d node_modules/redlock ] || [ ! -d node_modules/redlock-5 ] || [ ! -d node_modules/ioredis ]; then
  log "npm install (redlock, ioredis)"
  npm install --no-audit --no-fund >&2
fi
if ! .venv/bin/python -c 'import redis_lock, redis' 2>/dev/null; then
  log "venv + pip install -r requirements.txt"
  python3 -m venv .venv
  .venv/bin/pip install -q -r requirements.txt >&2
fi
export CARGO_TARGET_DIR="$here/target"
log "cargo build of rslock-load (no-op when up to date)"
cargo build --release -j2 -q --manifest-path rslock-load/Cargo.toml >&2
RELAYLOCK=${RELAYLOCK:-$root/target/release/relaylock}
if [ ! -x "$RELAYLOCK" ]; then
  if [ "$RELAYLOCK" != "$root/target/release/relaylock" ]; then
    log "RELAYLOCK=$RELAYLOCK is not an executable"; exit 1
  fi
  log "building relaylock-cli (target/release/relaylock is missing)"
  (cd "$root" && env -u CARGO_TARGET_DIR cargo build --release -j2 -p relaylock-cli >&2)
fi

# --- one redis-server on a free loopback port, stopped at the end ---
if [ -n "${REDIS_URL:-}" ]; then
  url=$REDIS_URL
else
  . "$here/redis-server.sh"
fi
log "redis $(redis-cli -u "$url" info server | tr -d '\r' | sed -n 's/^redis_version://p') at $url"

# Each run is bounded; a failed run is reported and the others still run.
run() {
  log "$1"
  shift
  timeout -k 5 60 "$@" || log "failed (exit $?): $*"
  sleep 1
}
args=(--url "$url" --workers "$WORKERS" --hold-ms "$HOLD_MS" --duration-s "$DURATION_S" --lease-s "$LEASE_S")

run "node-redlock (npm latest: redlock 4.2.0)" node redlock-load.js "${args[@]}" --module redlock
run "node-redlock 5.0.0-beta.2" node redlock-load.js "${args[@]}" --module redlock-5
run "python-redis-lock" .venv/bin/python redis_lock_load.py "${args[@]}"
run "rslock" "$CARGO_TARGET_DIR/release/rslock-load" "${args[@]}"
# relaylock's own line has no "lock" field: it is added here. --no-rtt: the
# bench's round-trip probe (a PING every 5 ms) would add Redis CPU that the
# other load programs do not send.
label="$("$RELAYLOCK" --version) (relaylock bench, pubsub)"
run "relaylock bench" bash -c 'set -o pipefail; "$0" bench --url "$1" --keys 1 --workers "$2" --hold-ms "$3" \
    --strategy pubsub --duration "$4s" --lease "$5s" --no-rtt --json | sed "s/^{/{\"lock\":\"$6\",/"' \
  "$RELAYLOCK" "$url" "$WORKERS" "$HOLD_MS" "$DURATION_S" "$LEASE_S" "$label"
