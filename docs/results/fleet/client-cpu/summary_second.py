#!/usr/bin/env python3
"""summary.py over second-two-core/ (the second pass: 09a4a10 against it,
   three rounds of lean/run.sh), for render.sh, whose markers take no
   arguments."""
import os, runpy, sys

here = os.path.dirname(os.path.abspath(__file__))
sys.argv = [sys.argv[0], 'second-two-core']
runpy.run_path(os.path.join(here, 'summary.py'), run_name='__main__')
