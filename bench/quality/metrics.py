"""B8's metrics: hit@k and MRR@10 over the distinct documents of a ranked list, summarised per
language."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

TOP_K = 10


LANGS = ("en", "zh", "all")


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


def summarize(rows: Sequence[tuple[str, Sequence[str], Sequence[str]]]) -> dict[str, Any]:
    """hit@1, hit@5, hit@10 and MRR@10 per language and over all, from (lang, answers, ranked)
    rows; a language with no question is reported with n = 0 and no figures."""
    out: dict[str, Any] = {}
    for lang in LANGS:
        chosen = [r for r in rows if lang == "all" or r[0] == lang]
        n = len(chosen)
        if not n:
            out[lang] = {"n": 0}
            continue
        out[lang] = {
            "n": n,
            "hit@1": round(sum(hit_at(r[2], r[1], 1) for r in chosen) / n, 4),
            "hit@5": round(sum(hit_at(r[2], r[1], 5) for r in chosen) / n, 4),
            "hit@10": round(sum(hit_at(r[2], r[1], 10) for r in chosen) / n, 4),
            "mrr@10": round(sum(reciprocal_rank(r[2], r[1]) for r in chosen) / n, 4),
        }
    return out
