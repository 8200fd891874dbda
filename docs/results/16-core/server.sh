# Sourced by run.sh here, run
# from the repository root with target/scale carried: the staged binaries and libraries
# on PATH, $out (the device's $OUT), $D (seconds per strategy), the machine's description
# in $out/machine.txt, and one redis-server 7.0.15 pinned to core 0 on port $port (its
# folder $dir, pid in $dir/pid); pin() runs a command on the given cores, and the bench
# takes cores 1..$last.
export PATH=$PWD/target/scale/bin:$PATH LD_LIBRARY_PATH=$PWD/target/scale/lib
out=${OUT:-/tmp/out}; mkdir -p "$out"; D=${D:-6s}
{ nproc; grep -m1 'model name' /proc/cpuinfo; uname -r; redis-server --version; } > "$out/machine.txt"
cat "$out/machine.txt"
port=6390; dir=$(mktemp -d); last=$(( $(nproc) - 1 ))
pin() { if command -v taskset >/dev/null; then taskset -c "$@"; else shift; "$@"; fi; }
pin 0 redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --daemonize yes --pidfile "$dir/pid" --logfile "$dir/log"
sleep 0.5; redis-cli -p $port ping
# bench_round BUILD ROUND ARGS...: one bench of BUILD (before: the staged
# relaylock-before; after: relaylock) against this server, on the bench's
# cores, 64 workers, appended to $out/BUILD-ROUND.jsonl.
bench_round() {
  local bin=relaylock; [ "$1" = before ] && bin=relaylock-before
  redis-cli -p $port flushall >/dev/null; echo "+ $1 round $2: ${*:3}" >&2
  pin 1-$last "$bin" bench --url redis://127.0.0.1:$port --no-rtt --json --duration "$D" \
    --workers 64 "${@:3}" 2>>"$out/stderr.txt" >> "$out/$1-$2.jsonl"
}
