"""B8's metrics: hit@k and MRR@10 over the distinct documents of a ranked list, summarised per
language (the keyword-style set) or per split, kind and language (the natural set)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

TOP_K = 10


LANGS = ("en", "zh", "all")


# The natural set's kinds (check_natural.KINDS) and splits (splits.py), in report order.
KINDS = ("en-paraphrase", "en-fact", "zh-paraphrase", "zh-to-en", "en-to-zh")


SPLITS = ("tuning", "heldout")


def distinct_documents(keys: Iterable[str]) -> list[str]:
    """The document keys of ranked hits, each document once, at its best (first) rank."""
    return list(dict.fromkeys(keys))


def hit_at(ranked: Sequence[str], answers: Iterable[str], k: int, *, depth: int = TOP_K) -> bool:
    """Whether an answer document is among the first `k` distinct documents of the first
    `depth` hits (`ranked` holds one document key per hit, best first)."""
    wanted = set(answers)
    return any(key in wanted for key in distinct_documents(ranked[:depth])[:k])


def reciprocal_rank(ranked: Sequence[str], answers: Iterable[str], *, depth: int = TOP_K) -> float:
    """1 / the rank of the first answer document among the distinct documents of the first
    `depth` hits; 0 when none is there."""
    wanted = set(answers)
    for rank, key in enumerate(distinct_documents(ranked[:depth]), start=1):
        if key in wanted:
            return 1.0 / rank
    return 0.0


def figures(rows: Sequence[tuple[Sequence[str], Sequence[str]]]) -> dict[str, Any]:
    """n, hit@1, hit@5, hit@10 and MRR@10 of (answers, ranked) rows; {"n": 0} for no row."""
    n = len(rows)
    if not n:
        return {"n": 0}
    return {
        "n": n,
        "hit@1": round(sum(hit_at(r[1], r[0], 1) for r in rows) / n, 4),
        "hit@5": round(sum(hit_at(r[1], r[0], 5) for r in rows) / n, 4),
        "hit@10": round(sum(hit_at(r[1], r[0], 10) for r in rows) / n, 4),
        "mrr@10": round(sum(reciprocal_rank(r[1], r[0]) for r in rows) / n, 4),
    }


def summarize(rows: Sequence[tuple[str, Sequence[str], Sequence[str]]]) -> dict[str, Any]:
    """hit@1, hit@5, hit@10 and MRR@10 per language and over all, from (lang, answers, ranked)
    rows; a language with no question is reported with n = 0 and no figures."""
    return {
        lang: figures([(r[1], r[2]) for r in rows if lang == "all" or r[0] == lang])
        for lang in LANGS
    }


def summarize_natural(
    rows: Sequence[tuple[str, str, str, Sequence[str], Sequence[str]]],
) -> dict[str, dict[str, Any]]:
    """The natural set's figures from (split, kind, lang, answers, ranked) rows: per split
    (tuning, heldout), per kind, per language of the question (en, zh) and over all."""
    out: dict[str, dict[str, Any]] = {}
    for split in SPLITS:
        mine = [r for r in rows if r[0] == split]
        groups: dict[str, Any] = {
            kind: figures([(r[3], r[4]) for r in mine if r[1] == kind]) for kind in KINDS
        }
        for lang in LANGS:
            groups[lang] = figures([(r[3], r[4]) for r in mine if lang == "all" or r[2] == lang])
        out[split] = groups
    return out
