"""B8's metrics: hit@k and MRR@10 over the distinct documents of a ranked list, summarised per
language (the keyword-style set) or per split, kind and language (the natural set).

The metrics themselves are the product's (`evaluation.metrics`, which a knowledge base's
evaluation runs use too): the developers' figures and the product's are computed by one piece of
code. What is B8's own here is how its questions are grouped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evaluation.metrics import TOP_K, distinct_documents, hit_at, reciprocal_rank
from evaluation.metrics import figures as _figures

__all__ = [
    "B8_METRICS",
    "KINDS",
    "LANGS",
    "SPLITS",
    "TOP_K",
    "distinct_documents",
    "figures",
    "hit_at",
    "reciprocal_rank",
    "summarize",
    "summarize_natural",
]

LANGS = ("en", "zh", "all")


# The natural set's kinds (check_natural.KINDS) and splits (splits.py), in report order.
KINDS = ("en-paraphrase", "en-fact", "zh-paraphrase", "zh-to-en", "en-to-zh")


SPLITS = ("tuning", "heldout")

# The figures B8 reports (a subset of what `evaluation.metrics` computes).
B8_METRICS = ("hit@1", "hit@5", "hit@10", "mrr@10")


def figures(rows: Sequence[tuple[Sequence[str], Sequence[str]]]) -> dict[str, Any]:
    """n, hit@1, hit@5, hit@10 and MRR@10 of (answers, ranked) rows; {"n": 0} for no row."""
    return _figures(rows, names=B8_METRICS)


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
