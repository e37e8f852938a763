"""`python -m ddplint`. Python puts the working directory first on sys.path for -m, so a
`click.py` (or `libcst.py`) in the linted project would be imported, and run, in place of
the real one: ddplint never reads code from there, so the entry goes before anything is imported."""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from ddplint.cli import main

main()
