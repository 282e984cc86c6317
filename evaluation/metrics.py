"""Retrieval metrics over ranked document keys: the one piece of code that computes both the
product's evaluation figures (`evaluation.run`) and the developers' (`bench/quality`, B8).

Pure functions: no database, no Django. Relevance is binary and document-level: a question's
expected documents are its relevant ones, and a document counts once, at the rank of its first
(best) chunk. `ranked` is one document key per hit, best first (several hits may share a
document); only the first `depth` hits are read, and ranks count distinct documents among them.

- hit@k: an expected document is among the first k documents.
- MRR@10: 1 / the rank of the first expected document (0 when none is there).
- nDCG@10: DCG = sum of 1 / log2(rank + 1) over the expected documents found, divided by the
  DCG of an ideal list (every expected document first, as many as fit in k).
- recall@k: the share of the expected documents among the first k documents.
- latency p50 / p95: percentiles by linear interpolation between the closest ranks (numpy's
  default), in milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

TOP_K = 10
# Every figure a question set gets, in the order pages and reports show them.
METRICS = ("hit@1", "hit@5", "hit@10", "mrr@10", "ndcg@10", "recall@5", "recall@10")
# The figures are rounded so that a stored summary and one recomputed from the results agree.
DIGITS = 4


def distinct_documents(keys: Iterable[str]) -> list[str]:
    """The document keys of ranked hits, each document once, at its best (first) rank."""
    return list(dict.fromkeys(keys))


def _documents(ranked: Sequence[str], depth: int) -> list[str]:
    return distinct_documents(ranked[:depth])


def first_rank(ranked: Sequence[str], answers: Iterable[str], *, depth: int = TOP_K) -> int | None:
    """The rank (1-based) of the first expected document among the distinct documents of the
    first `depth` hits; None when none is there."""
    wanted = set(answers)
    for rank, key in enumerate(_documents(ranked, depth), start=1):
        if key in wanted:
            return rank
    return None


def hit_at(ranked: Sequence[str], answers: Iterable[str], k: int, *, depth: int = TOP_K) -> bool:
    """Whether an answer document is among the first `k` distinct documents of the first
    `depth` hits (`ranked` holds one document key per hit, best first)."""
    rank = first_rank(ranked, answers, depth=depth)
    return rank is not None and rank <= k


def reciprocal_rank(ranked: Sequence[str], answers: Iterable[str], *, depth: int = TOP_K) -> float:
    """1 / the rank of the first answer document among the distinct documents of the first
    `depth` hits; 0 when none is there."""
    rank = first_rank(ranked, answers, depth=depth)
    return 0.0 if rank is None else 1.0 / rank


def ndcg_at(
    ranked: Sequence[str], answers: Iterable[str], k: int = TOP_K, *, depth: int = TOP_K
) -> float:
    """nDCG@k with binary relevance: each expected document found at rank r gives
    1 / log2(r + 1); the sum is divided by the best possible (all expected documents first)."""
    wanted = set(answers)
    if not wanted:
        return 0.0
    gained = sum(
        1.0 / math.log2(rank + 1)
        for rank, key in enumerate(_documents(ranked, depth)[:k], start=1)
        if key in wanted
    )
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(wanted), k) + 1))
    return gained / ideal


def recall_at(
    ranked: Sequence[str], answers: Iterable[str], k: int, *, depth: int = TOP_K
) -> float:
    """The share of the expected documents among the first `k` distinct documents."""
    wanted = set(answers)
    if not wanted:
        return 0.0
    return len(wanted & set(_documents(ranked, depth)[:k])) / len(wanted)


def _metric(name: str, ranked: Sequence[str], answers: Sequence[str]) -> float:
    kind, _, k = name.partition("@")
    if kind == "hit":
        return float(hit_at(ranked, answers, int(k)))
    if kind == "mrr":
        return reciprocal_rank(ranked, answers, depth=int(k))
    if kind == "ndcg":
        return ndcg_at(ranked, answers, int(k))
    if kind == "recall":
        return recall_at(ranked, answers, int(k))
    raise ValueError(f"unknown metric {name!r}")


def figures(
    rows: Sequence[tuple[Sequence[str], Sequence[str]]], *, names: Sequence[str] = METRICS
) -> dict[str, Any]:
    """n and the mean of each metric in `names` over (answers, ranked) rows, rounded to
    DIGITS places; {"n": 0} for no row."""
    n = len(rows)
    if not n:
        return {"n": 0}
    out: dict[str, Any] = {"n": n}
    for name in names:
        out[name] = round(
            sum(_metric(name, ranked, answers) for answers, ranked in rows) / n, DIGITS
        )
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q`-th percentile (0-100) of `values`, interpolated linearly between the closest
    ranks; None for no value."""
    if not values:
        return None
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


@dataclass(frozen=True)
class Answer:
    """One question's answer in one mode: what it expected and what came back (document keys,
    best first), with what the figures are grouped by."""

    expected: Sequence[str]
    returned: Sequence[str]
    language: str = ""
    tag: str = ""
    latency_ms: float | None = None
    passage_found: bool | None = None  # None: the question gives no expected passage


def _group(answers: Sequence[Answer]) -> dict[str, Any]:
    out = figures([(a.expected, a.returned) for a in answers])
    with_passage = [a.passage_found for a in answers if a.passage_found is not None]
    if with_passage:
        out["n_passage"] = len(with_passage)
        out["passage@10"] = round(sum(with_passage) / len(with_passage), DIGITS)
    return out


def summarize(answers: Sequence[Answer]) -> dict[str, Any]:
    """One mode's figures: over all questions ("all"), per language and per tag (only those
    the questions have), the share of expected passages found where questions give one, and
    the latency's p50 and p95."""
    languages = sorted({a.language for a in answers if a.language})
    tags = sorted({a.tag for a in answers if a.tag})
    latencies = [a.latency_ms for a in answers if a.latency_ms is not None]
    p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
    return {
        "all": _group(answers),
        "language": {
            lang: _group([a for a in answers if a.language == lang]) for lang in languages
        },
        "tag": {tag: _group([a for a in answers if a.tag == tag]) for tag in tags},
        "latency_ms": {
            "p50": None if p50 is None else round(p50, 1),
            "p95": None if p95 is None else round(p95, 1),
        },
    }
