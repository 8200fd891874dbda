#!/usr/bin/env bash
# Where the acquire calls beyond one per acquisition come from (issue 23,
# targets 2 and 3): a build with tries.patch applied counts every try of a
# lock call by why it was made and whether it took the lock, and every
# in-process grant (no call), and each bench worker prints its counts. The
# patch is measurement only (a static counter array, not in the library).
#
#   docs/results/fleet/tries/run.sh > docs/results/fleet/tries/summary.md
#
# Builds the current commit with the patch in a scratch worktree (its own
# target dir, target/tries: the first build compiles every dependency).
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
here="$root/docs/results/fleet/tries"
work=$(mktemp -d)
git -C "$root" worktree add -q --detach "$work/tree" HEAD
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cleanup() {
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  git -C "$root" worktree remove --force "$work/tree" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
git -C "$work/tree" apply "$here/tries.patch"
(cd "$work/tree" && CARGO_TARGET_DIR="$root/target/tries" cargo build --release -j2 -p relaylock-cli >&2)
bin="$root/target/tries/release/relaylock"
redis-server --port "$port" --save '' --appendonly no --daemonize yes --logfile "$work/redis.log"
sleep 0.5
echo '```text'
echo "commit $(git -C "$root" rev-parse --short HEAD) + tries.patch; $(nproc) cores"
run() {
  local label=$1; shift
  "$bin" bench --url "redis://127.0.0.1:$port" --workers 64 --no-rtt --strategy pubsub "$@" \
    2>"$work/err" >"$work/out"
  python3 "$here/summary.py" "$label" "$work/out" "$work/err"
}
run "256 keys, 4 x 64, hold 1 ms, 8 s" --keys 256 --processes 4 --hold-ms 1 --duration 8s
for n in 1 4 12; do
  run "1 key, $n x 64, hold 1 ms, 6 s" --keys 1 --processes "$n" --hold-ms 1 --duration 6s
done
echo '```'
