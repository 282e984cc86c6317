"""`python -m bench.quality2 [run.py's options]`: B8 on the second corpus (issue 38).

Builds the corpus when it is missing (`bench.quality2.corpus`), then runs B8's own measurement
(`bench.quality.run`: Canon's three modes and the contenders on the same live chunks, the per-leg
dump and the offline check) on it, with its natural questions and split, no keyword-style set,
in a database and Redis database of its own, writing bench/results/quality2.json,
quality2-details.json and quality2-legs.json. Options given here come after these defaults and
win (for example `--db canon_c2 --redis-db 11 --reuse`).
"""

from __future__ import annotations

import sys

from bench.quality import run
from bench.quality2 import corpus, splits

DB_NAME = "canon_quality2"
REDIS_DB = 5
RESULTS_NAME = "quality2"


def defaults() -> list[str]:
    """run.py's arguments for corpus 2."""
    return [
        "--corpus",
        str(corpus.CORPUS),
        "--natural",
        str(splits.NATURAL),
        "--splits",
        str(splits.SPLITS),
        "--no-keyword",
        "--db",
        DB_NAME,
        "--redis-db",
        str(REDIS_DB),
        "--results",
        RESULTS_NAME,
    ]


def main(argv: list[str] | None = None) -> int:
    corpus.ensure_corpus()
    return run.main(defaults() + list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
