#!/usr/bin/env bash
# The script-level harness (harness.py) on three pairs of scripts: relaylock's
# ACQUIRE and RELEASE before the integer replies (f9682a5), after them
# (efe9f14), and a floor pair with the same arguments that only GETs, takes
# TIME and SETs (what any fenced script pays: the fixed cost of EVALSHA and
# its KEYS and ARGV tables).
#   docs/results/fleet/lean/harness.sh > docs/results/fleet/lean/harness.txt
set -euo pipefail
cd "$(dirname "$0")"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
extract() { # rev outdir
  mkdir -p "$2"
  git show "$1:src/scripts.rs" | python3 -c '
import re, sys
s = sys.stdin.read()
for name in ("ACQUIRE", "RELEASE"):
    m = re.search(r"pub const %s: &str = r#\"\n(.*?)\"#;" % name, s, re.S)
    open(sys.argv[1] + "/" + name.lower() + ".lua", "w").write(m.group(1))' "$2"
}
extract f9682a5 "$dir/before"
extract efe9f14 "$dir/after"; touch "$dir/after/lean"
mkdir -p "$dir/floor"
cat > "$dir/floor/acquire.lua" <<'LUA'
local v = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. string.format('%d', f), 'PX', ARGV[2])
return f
LUA
cat > "$dir/floor/release.lua" <<'LUA'
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '-1', 'PX', 60000)
return 1
LUA
touch "$dir/floor/lean"
echo '```text'
echo "redis-server $(redis-server --version | awk '{print $3}'); $(nproc) cores; 256 keys, ${ROUNDS:-7} rounds of ${CYCLES:-200} cycles"
cd "$dir" && ROUNDS=${ROUNDS:-7} python3 "$OLDPWD/harness.py" before after floor
echo '```'
