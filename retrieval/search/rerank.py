"""The rerank stage: a reranker (`embeddings.rerank`, CANON_RERANK_*) reorders the first
CANON_RERANK_CANDIDATES fused hits of a hybrid search by its own scores.

Only hybrid searches are reranked. `vector` and `keyword` ask for one leg's ranking by name (to
compare the legs, to look up an identifier) and `vector` is the one-statement fast path; hybrid,
the default, is the search meant to answer questions, so that is where the reranker earns its
round trip. Each leg then reads at least the candidates (`RerankPlan.depth`).

The stage runs after the search's snapshot has closed, so no transaction waits on HTTP, and it
never fails a search: when the reranker is unavailable, slow, open-circuited, refuses the
request or answers nonsense, the search answers in the fused order, says so (`reranked: false`
and the reason), and logs one warning. A hit keeps its fused `score`; the reranker's is
`rerank_score`.

Reasons (`Rerank.reason`): not_requested (the request said `rerank: false`), not_configured
(CANON_RERANK_URL is empty), not_hybrid; and after a call: circuit_open, timeout, unavailable
(unreachable, 5xx, 429, Retry-After), rejected (another 4xx), bad_answer (a malformed answer).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from django.conf import settings

from embeddings import (
    CircuitOpen,
    EmbeddingError,
    EmbeddingShapeError,
    ProviderRejected,
)
from embeddings.rerank import Reranker, RerankTimeout, reranker_from_settings
from retrieval.metrics import RERANK_OUTCOMES
from retrieval.search.fusion import FusionModel, fuse_legs
from retrieval.search.hits import Hit, Leg, Rerank

logger = logging.getLogger(__name__)

NOT_REQUESTED = "not_requested"
NOT_CONFIGURED = "not_configured"
NOT_HYBRID = "not_hybrid"
CIRCUIT_OPEN = "circuit_open"
TIMEOUT = "timeout"
UNAVAILABLE = "unavailable"
REJECTED = "rejected"
BAD_ANSWER = "bad_answer"
REASONS = (
    NOT_REQUESTED,
    NOT_CONFIGURED,
    NOT_HYBRID,
    CIRCUIT_OPEN,
    TIMEOUT,
    UNAVAILABLE,
    REJECTED,
    BAD_ANSWER,
)


@dataclass(frozen=True)
class RerankPlan:
    """Whether a search is reranked: its reranker and how many fused hits it scores, or why
    not (`skipped`)."""

    reranker: Reranker | None
    candidates: int = 0
    skipped: str | None = None

    def depth(self, limit: int) -> int:
        """How many rows each leg reads: `limit`, and at least the candidates when reranking."""
        return max(limit, self.candidates) if self.reranker is not None else limit


def rerank_plan(*, mode: str, requested: bool = True) -> RerankPlan:
    """The plan of a search of `mode`; `requested` is the request's `rerank` (default true).
    Reads the settings only; no I/O."""
    if not requested:
        return RerankPlan(None, skipped=NOT_REQUESTED)
    reranker = reranker_from_settings()
    if reranker is None:
        return RerankPlan(None, skipped=NOT_CONFIGURED)
    if mode != "hybrid":
        return RerankPlan(None, skipped=NOT_HYBRID)
    return RerankPlan(reranker, candidates=settings.RERANK_CANDIDATES)


def rerank_stage(
    plan: RerankPlan,
    *,
    query: str,
    legs: list[Leg],
    top_k: int,
    fusion: str | None = None,
    parameters: FusionModel | None = None,
) -> tuple[list[Hit], Rerank]:
    """The search's top_k hits from its legs (one leg's own, or the legs fused by `fusion`, by
    default CANON_HYBRID_FUSION) and what the rerank stage did. With a reranker, the first
    `plan.candidates` fused hits go in its order (a text it did not score after those it did, in
    their fused order), then the rest of the fused order. Call it outside any transaction: it
    may wait on HTTP for the reranker's timeout. Never raises the reranker's errors: it answers
    the fused order instead. `parameters`: the learned fusion's (a knowledge base's calibration),
    by default the shipped ones."""
    if len(legs) == 1:
        return legs[0].hits, Rerank(reason=plan.skipped)
    if plan.reranker is None:
        return fuse_legs(legs, top_k, query=query, method=fusion, parameters=parameters), Rerank(
            reason=plan.skipped
        )
    fused = fuse_legs(
        legs, max(top_k, plan.candidates), query=query, method=fusion, parameters=parameters
    )
    head = fused[: plan.candidates]
    if not head:
        return [], Rerank(reranked=True)  # nothing to reorder: no call
    try:
        scores = plan.reranker.rerank(query, [hit.text for hit in head])
    except EmbeddingError as exc:
        reason = _reason(exc)
        RERANK_OUTCOMES.labels(outcome=reason).inc()
        logger.warning("search not reranked (%s); answering in the fused order: %s", reason, exc)
        # Fused for top_k afresh: the learned fusion orders a document's passages among the
        # places it gave them, so the first top_k of a longer list can differ.
        return fuse_legs(legs, top_k, query=query, method=fusion, parameters=parameters), Rerank(
            reason=reason
        )
    RERANK_OUTCOMES.labels(outcome="reranked").inc()
    return [*reorder(head, scores), *fused[len(head) :]][:top_k], Rerank(reranked=True)


def rerank_ranked(
    plan: RerankPlan, *, query: str, hits: list[Hit], top_k: int
) -> tuple[list[Hit], Rerank]:
    """`hits`, already in one order (a search of several knowledge bases, merged), with their
    first `plan.candidates` reordered by the reranker; their own order when there is none or it
    fails. Never raises the reranker's errors."""
    if plan.reranker is None:
        return hits[:top_k], Rerank(reason=plan.skipped)
    head = hits[: plan.candidates]
    if not head:
        return [], Rerank(reranked=True)
    try:
        scores = plan.reranker.rerank(query, [hit.text for hit in head])
    except EmbeddingError as exc:
        reason = _reason(exc)
        RERANK_OUTCOMES.labels(outcome=reason).inc()
        logger.warning("search not reranked (%s); answering in the merged order: %s", reason, exc)
        return hits[:top_k], Rerank(reason=reason)
    RERANK_OUTCOMES.labels(outcome="reranked").inc()
    return [*reorder(head, scores), *hits[len(head) :]][:top_k], Rerank(reranked=True)


def reorder(hits: Sequence[Hit], scores: Sequence[float | None]) -> list[Hit]:
    """`hits` by `scores`, the highest first, each carrying its score (`rerank_score`); ties
    and unscored hits (None, last) keep their order."""
    places = sorted(range(len(hits)), key=lambda i: (scores[i] is None, -(scores[i] or 0.0), i))
    return [replace(hits[i], rerank_score=scores[i]) for i in places]


def _reason(exc: EmbeddingError) -> str:
    if isinstance(exc, CircuitOpen):
        return CIRCUIT_OPEN
    if isinstance(exc, RerankTimeout):
        return TIMEOUT
    if isinstance(exc, ProviderRejected):
        return REJECTED
    if isinstance(exc, EmbeddingShapeError):
        return BAD_ANSWER
    return UNAVAILABLE  # ProviderUnavailable: unreachable, 5xx, 429, a Retry-After not yet passed
