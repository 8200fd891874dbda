#!/usr/bin/env python3
"""t4_summary.py over t4-second/ (the second pass: 09a4a10 against it), for
   render.sh, whose markers take no arguments."""
import os, runpy, sys

here = os.path.dirname(os.path.abspath(__file__))
sys.argv = [sys.argv[0], 't4-second']
runpy.run_path(os.path.join(here, 't4_summary.py'), run_name='__main__')
