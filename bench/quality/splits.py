"""The natural questions' fixed split into a tuning half and a held-out half (issue 24).

    python -m bench.quality.splits           # write splits.json from natural.jsonl
    python -m bench.quality.splits --check   # exit 1 if splits.json is not what it gives

Every choice (weights, depths, methods, models, thresholds) is made on the tuning half only; the
held-out half is the figure that counts. The assignment is a pure function of the questions' ids
and kinds and of SEED: within each kind the ids are ordered by sha256(SEED + ":" + id), the first
half (rounded down) is `tuning`, the rest `heldout`. splits.json keeps the assignment in the
repository, and a unit test checks that regenerating it gives the same file, so it never changes
silently (adding questions to a kind may move the boundary: regenerate, and say so).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
NATURAL = HERE / "natural.jsonl"
SPLITS = HERE / "splits.json"

SEED = "canon-b8-issue-24"
TUNING = "tuning"
HELDOUT = "heldout"
SPLIT_NAMES = (TUNING, HELDOUT)


def _order(question_id: str, seed: str) -> str:
    return hashlib.sha256(f"{seed}:{question_id}".encode()).hexdigest()


def assign(questions: Iterable[Mapping[str, object]], *, seed: str = SEED) -> dict[str, str]:
    """id -> "tuning" or "heldout": per kind, ids ordered by sha256(seed:id), the first
    floor(n / 2) tuning and the rest held out. Ids must be unique."""
    by_kind: dict[str, list[str]] = {}
    seen: set[str] = set()
    for q in questions:
        qid = str(q["id"])
        if qid in seen:
            raise ValueError(f"duplicate question id {qid!r}")
        seen.add(qid)
        by_kind.setdefault(str(q["kind"]), []).append(qid)
    out: dict[str, str] = {}
    for ids in by_kind.values():
        ordered = sorted(ids, key=lambda qid: (_order(qid, seed), qid))
        half = len(ordered) // 2
        for i, qid in enumerate(ordered):
            out[qid] = TUNING if i < half else HELDOUT
    return {qid: out[qid] for qid in sorted(out)}


def read_questions(path: Path = NATURAL) -> list[dict[str, object]]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


ABOUT = (
    "B8's natural questions (natural.jsonl), split once: within each kind, ids ordered by "
    "sha256(seed + ':' + id), the first half (rounded down) tuning, the rest heldout. Generated "
    "by `python -m bench.quality.splits`; do not edit by hand."
)


def render(questions: list[dict[str, object]], *, seed: str = SEED, about: str = ABOUT) -> str:
    """splits.json's text for these questions: what it is (`about`), the seed, counts per kind
    and split, and the assignment by id."""
    splits = assign(questions, seed=seed)
    kinds = sorted({str(q["kind"]) for q in questions})
    counts = {
        kind: {
            name: sum(1 for q in questions if q["kind"] == kind and splits[str(q["id"])] == name)
            for name in SPLIT_NAMES
        }
        for kind in kinds
    }
    doc = {
        "about": about,
        "seed": seed,
        "counts": counts,
        "splits": splits,
    }
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def load(path: Path = SPLITS) -> dict[str, str]:
    """The committed assignment, id -> split."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in data["splits"].items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--questions", type=Path, default=NATURAL)
    parser.add_argument("--out", type=Path, default=SPLITS)
    a = parser.parse_args(argv)
    text = render(read_questions(a.questions))
    if a.check:
        if not a.out.exists() or a.out.read_text(encoding="utf-8") != text:
            print(f"{a.out} is not what `python -m bench.quality.splits` writes", file=sys.stderr)
            return 1
        print(f"{a.out}: up to date")
        return 0
    a.out.write_text(text, encoding="utf-8")
    print(f"wrote {a.out}: {json.loads(text)['counts']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
