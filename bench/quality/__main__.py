"""`python -m bench.quality [--provider ...] [--limit-docs N]`: B8 retrieval quality (run.py)."""

from __future__ import annotations

import sys

from bench.quality.run import main

if __name__ == "__main__":
    sys.exit(main())
