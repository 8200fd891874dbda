#!/usr/bin/env python3
"""The instructions table of docs/benchmarks.md: the per-variant counts of
counted.txt (its first block), without the per-part breakdowns below them.

    python3 docs/results/counted.py
"""
import os

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "counted.txt")
lines = open(path).read().split("\n")
end = lines.index("")  # the variants end at the first blank line
print("\n".join(lines[:end] + ["```"]))
