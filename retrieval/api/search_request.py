"""The search request core: what every door does between its own request shape and its own answer
shape. The doors are the REST API's SearchView, the MCP server's `search` tool, Dify's retrieval
and OpenAI's vector-store search. Each builds a REST search body from its request and hands it
to `search_request`. That validates the body (SearchInput, or `search_input_fast` for the common
one) and runs it (`run_search`: the knowledge bases resolved in the principal's scope, the filter
checked against their fields, the replica or the embedding provider perhaps down).

A failure the caller may be told about is classified here, once, by `search_failure`, and raised
as SearchRefused carrying that SearchFailure. A door only words a SearchFailure in its own shape,
each with a small table (`views.search_refusal`, `tools.refusal`, `dify.refusal`,
`vector_stores.refusal`). Anything else (the primary database down, a bug) is each door's 500.

A SearchFailure's message is safe to show: it echoes what the caller sent, never says whether a
knowledge base it may not search exists (an unknown one and a forbidden one are one NOT_FOUND),
and never names the servers behind it. The embedding provider's address and answer are logged,
not sent."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import embeddings
from retrieval.api.searching import (
    HistoryNotAllowed,
    SearchUnavailable,
    retry_after_seconds,
    run_search,
)
from retrieval.api.serializers import SearchInput, search_input_fast
from retrieval.filters import FilterError
from retrieval.principals import KnowledgeBaseNotFound, Principal
from retrieval.search.history import HistoryOutOfRange
from retrieval.search.hits import SearchResult

logger = logging.getLogger("canon.api")


class Kind(StrEnum):
    """What went wrong; the value is the stable code (the REST API's `error`)."""

    INVALID = "invalid"  # the body, or a filter that does not fit the knowledge base's fields
    NOT_FOUND = "not_found"  # unknown, or not the principal's to search: never told apart
    HISTORY_FORBIDDEN = "permission_denied"  # `as_of` without the right to read history
    RATE_LIMITED = "throttled"  # the principal's read budget is spent
    SEARCH_UNAVAILABLE = "search_unavailable"  # the search replica is down
    PROVIDER_UNAVAILABLE = "provider_unavailable"  # the query cannot be embedded now
    PROVIDER_REFUSED = "provider_refused"  # the provider refused it, or cannot be used as set


STATUS = {
    Kind.INVALID: 400,
    Kind.HISTORY_FORBIDDEN: 403,
    Kind.NOT_FOUND: 404,
    Kind.RATE_LIMITED: 429,
    Kind.SEARCH_UNAVAILABLE: 503,
    Kind.PROVIDER_UNAVAILABLE: 503,
    Kind.PROVIDER_REFUSED: 502,
}
PROVIDER_UNAVAILABLE = (
    "The query could not be embedded: the embedding provider is unavailable; try again."
)
PROVIDER_REFUSED = (
    "The query could not be embedded: the embedding provider refused it; the knowledge base's "
    "embedding settings need an administrator."
)


@dataclass(frozen=True)
class SearchFailure:
    """A refused search, classified. `message` is safe to show (the module docstring). For
    INVALID, `errors` holds the problems per REST body field (DRF's shape: field -> messages),
    `place` says where the first one is ("top_k", "filter.and[0].field"; None for the body as a
    whole) and `message` is its text without the place. `retry_after`: whole seconds, for
    RATE_LIMITED and the two unavailable kinds."""

    kind: Kind
    message: str
    errors: Mapping[str, Any] | None = None
    place: str | None = None
    retry_after: int | None = None

    @property
    def status(self) -> int:
        return STATUS[self.kind]

    @property
    def code(self) -> str:
        return self.kind.value


class SearchRefused(Exception):
    """A search refused for `failure`."""

    def __init__(self, failure: SearchFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def first_error(errors: Any, place: str = "") -> tuple[str | None, str]:
    """DRF's validation errors as (the first field's dotted place, its message)."""
    if isinstance(errors, Mapping):
        for name, problems in errors.items():
            here = place if name == "non_field_errors" else f"{place}.{name}".strip(".")
            return first_error(problems, here)
    if isinstance(errors, list) and errors:
        if all(isinstance(e, str) for e in errors):
            return place or None, " ".join(str(e) for e in errors)
        for i, item in enumerate(errors):
            if item:
                return first_error(item, f"{place}[{i}]")
    return place or None, str(errors)


def invalid(errors: Mapping[str, Any]) -> SearchFailure:
    """INVALID for DRF-shaped `errors`, placed at the first one."""
    place, message = first_error(errors)
    return SearchFailure(Kind.INVALID, message, errors=errors, place=place)


def filter_invalid(exc: FilterError) -> SearchFailure:
    """INVALID for a filter that cannot be applied: Canon's (`filter`) or one a door translated
    from its own shape, whose place starts with the field the caller wrote."""
    errors = {"filter": [str(exc)]}
    return SearchFailure(Kind.INVALID, exc.message, errors=errors, place=exc.place)


def not_found(kb: Any) -> SearchFailure:
    """NOT_FOUND for the knowledge base(s) `kb` the caller named, whether none exists or the
    principal may not search it."""
    return SearchFailure(Kind.NOT_FOUND, f"Knowledge base {kb!r} not found.")


def rate_limited(wait: float | None) -> SearchFailure:
    """RATE_LIMITED, `wait` seconds before the budget's window ends (`rate_limit_wait`)."""
    seconds = max(1, math.ceil(wait or 1))
    return SearchFailure(
        Kind.RATE_LIMITED, f"Rate limited; retry after {seconds} s.", retry_after=seconds
    )


def search_failure(exc: Exception, *, kb: Any = None) -> SearchFailure | None:
    """The one classification of a search's failures, or None for one the caller may not be
    told about (each door's 500). `kb`: the knowledge base(s) the caller named, for NOT_FOUND's
    message (the exception may name one by its internal id)."""
    if isinstance(exc, SearchRefused):
        return exc.failure
    if isinstance(exc, FilterError):
        return filter_invalid(exc)
    if isinstance(exc, HistoryOutOfRange):
        return invalid({"as_of": [str(exc)]})
    if isinstance(exc, KnowledgeBaseNotFound):
        return not_found(kb if kb is not None else exc.args[0] if exc.args else "")
    if isinstance(exc, HistoryNotAllowed):
        return SearchFailure(Kind.HISTORY_FORBIDDEN, "Only index admins may search as of.")
    if isinstance(exc, SearchUnavailable):
        return SearchFailure(
            Kind.SEARCH_UNAVAILABLE,
            "Search is unavailable; try again.",
            retry_after=exc.retry_after,
        )
    if isinstance(exc, embeddings.ProviderUnavailable):  # down, or its breaker open
        logger.info("search refused, the query could not be embedded: %s", exc)
        return SearchFailure(
            Kind.PROVIDER_UNAVAILABLE, PROVIDER_UNAVAILABLE, retry_after=retry_after_seconds(exc)
        )
    if isinstance(exc, (embeddings.ProviderRejected, embeddings.ProviderMisconfigured)):
        # retrying cannot help (a 4xx from the provider, a model it lacks, a package missing);
        # its words may quote the provider's answer, so only its kind is logged
        logger.warning("search refused, the provider refused the query: %s", type(exc).__name__)
        return SearchFailure(Kind.PROVIDER_REFUSED, PROVIDER_REFUSED)
    return None


def search_data(body: Any) -> dict[str, Any]:
    """SearchInput's validated data for a REST search body; SearchRefused (INVALID) otherwise."""
    data = search_input_fast(body)
    if data is not None:
        return data
    if not isinstance(body, dict):
        raise SearchRefused(invalid({"non_field_errors": ["Expected a JSON object."]}))
    params = SearchInput(data=body)
    if not params.is_valid():
        raise SearchRefused(invalid(params.errors))
    return dict(params.validated_data)


def search_request(*, principal: Principal, body: Any, fusion: str | None = None) -> SearchResult:
    """The search a REST search `body` asks for, within the principal's scope (`run_search`;
    `fusion` as there). Raises SearchRefused for every failure `search_failure` classifies;
    anything else propagates."""
    data = search_data(body)
    try:
        return run_search(principal=principal, data=data, fusion=fusion)
    except Exception as exc:
        failure = search_failure(exc, kb=data["kb"])
        if failure is None:
            raise
        raise SearchRefused(failure) from exc
