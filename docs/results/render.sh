#!/usr/bin/env bash
# Splices the tables of docs/benchmarks.md from the saved results, so no
# figure in it is typed by hand. Run from the repository root after a
# benchmark run; needs the relaylock binary (cargo build --release -p relaylock-cli).
#
#   <!-- table: X.jsonl -->  relaylock report --markdown docs/results/X.jsonl
#   <!-- py: X.py [args] --> python3 docs/results/X.py [args] (reads the raw results)
#   <!-- file: X -->         docs/results/X as it is (saved output)
# each up to the next <!-- /table -->, and
#   <!-- plot: P.svg X.jsonl --> relaylock report --plot docs/P.svg docs/results/X.jsonl
# (the plot is written beside the doc; the marker stays as it is).
set -euo pipefail
bin=${RELAYLOCK_BIN:-target/release/relaylock}
doc=docs/benchmarks.md
tmp=$(mktemp)
awk -v bin="$bin" '
  /<!-- table: / { print; system(bin " report --markdown docs/results/" $3); skip=1; next }
  /<!-- py: /    { print; args = ""; for (i = 4; i < NF; i++) args = args " " $i
                   system("python3 docs/results/" $3 args); skip=1; next }
  /<!-- file: /  { print; system("cat docs/results/" $3); skip=1; next }
  /<!-- plot: /  { print; if (system(bin " report --plot docs/" $3 " docs/results/" $4 " >/dev/null 2>&1")) exit 1; next }
  /<!-- \/table -->/ { skip=0 }
  !skip { print }
' "$doc" > "$tmp"
mv "$tmp" "$doc"
