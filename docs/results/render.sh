#!/usr/bin/env bash
# Splices the tables of docs/benchmarks.md from the saved results, so no
# figure in it is typed by hand. Run from the repository root after a
# benchmark run; needs the relaylock binary (cargo build --release --features cli).
set -euo pipefail
bin=${RELAYLOCK_BIN:-target/release/relaylock}
doc=docs/benchmarks.md
tmp=$(mktemp)
awk -v bin="$bin" '
  /<!-- table: / { print; file=$3; system(bin " report --markdown docs/results/" file); skip=1; next }
  /<!-- \/table -->/ { skip=0 }
  !skip { print }
' "$doc" > "$tmp"
mv "$tmp" "$doc"
