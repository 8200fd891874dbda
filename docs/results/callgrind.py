"""callgrind_annotate's report, line by line, for the results scripts that
count instructions (fleet/client-cpu/instructions.py, fleet/counted/counted.py)."""
import re
import subprocess

LINE = re.compile(r'\s*([\d,]+)\s+\(.*?\)\s+(.*)')


def lines(f, inclusive):
    """(instructions, the rest of the line: `file:function [object]`) for each
    counted line of callgrind_annotate's report on the callgrind file F, by
    inclusive or self cost; the program's totals left out."""
    out = subprocess.run(['callgrind_annotate', f'--inclusive={"yes" if inclusive else "no"}',
                          '--threshold=100', f], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        m = LINE.match(line)
        if m and 'PROGRAM TOTALS' not in line:
            yield int(m.group(1).replace(',', '')), m.group(2)
