"""The OpenAI vector-store API's reads, so any OpenAI client can search Canon: point it at
`{host}/api/openai/v1` with a Canon API key (`OpenAI(base_url=..., api_key=...)`).

- `GET /vector_stores`: the knowledge bases this key may search, as vector stores (id = the
  knowledge base's slug), newest first unless `order=asc`, paged by `limit`, `after`, `before`.
  A cursor that names no vector store of this key's (one deleted or taken out of the key's
  scope between two pages, or never one) gives an empty page, not an error: OpenAI's cursors
  are positions, and its client's iteration ends there rather than failing.
- `GET /vector_stores/{id}`: one of them.
- `POST /vector_stores/{id}/search`: `query` (a string, or a list of strings searched as one
  query), `max_num_results` (1-50, default 10), `filters` (OpenAI's comparison and compound
  filters, on the knowledge base's metadata fields, the built-in key, title, content_type,
  created, updated, revision, and the attributes every result carries: kb, document_key,
  document_id; a date as "YYYY-MM-DD" or, as OpenAI's attributes carry dates, Unix seconds),
  `ranking_options` ({"ranker": "none" skips Canon's reranker, "auto" or
  "default-2024-11-15" use it when configured; "score_threshold": 0 to 1}), and
  `rewrite_query`, accepted and ignored: Canon does not rewrite queries, and the answer's
  `search_query` says what was searched. Each result is one chunk: file_id `doc_<document id>`,
  filename the name the live revision was uploaded as (else the document's key), the score of
  the learned hybrid fusion (0 to 1, whatever CANON_HYBRID_FUSION says: `common.FUSION`), the
  document's scalar metadata and Canon's citation as `attributes`.

A vector store's file_counts and usage_bytes count only the documents this key may read (not
deleted): `completed` those live in the active index version, `in_progress` the others (being
built, awaiting approval, or whose build failed), the bytes of the live revisions' files.

Errors are OpenAI's shape, {"error": {"message", "type", "param", "code"}}: 400 invalid request,
401 no or refused key, 404 a vector store that does not exist or this key may not search (never
told apart; `code` null, as OpenAI answers it), 429 rate limited (the REST search's read
budget), 503 search or the embedding provider unavailable (with Retry-After).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Sum
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.exceptions import (
    APIException,
    AuthenticationFailed,
    NotAuthenticated,
    NotFound,
    Throttled,
    ValidationError,
)
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from kb.models import KnowledgeBase, Publication
from retrieval.api.auth import HasPrincipal, request_principal
from retrieval.api.search_request import (
    Kind,
    SearchFailure,
    SearchRefused,
    filter_invalid,
    first_error,
    rate_limited,
    search_request,
)
from retrieval.api.throttling import READ
from retrieval.citations import citation_of
from retrieval.compat.common import (
    FUSION,
    BearerKeyAuthentication,
    CompatSchema,
    DocumentFacts,
    KeyRefused,
    caller_place,
    document_facts,
)
from retrieval.documents import knowledge_bases, readable_documents
from retrieval.filters import FilterError
from retrieval.filters.shapes import from_openai
from retrieval.principals import KnowledgeBaseNotFound, Principal
from retrieval.search.hits import Hit
from retrieval.search.visibility import knowledge_base_for

MAX_NUM_RESULTS = 50
LIST_LIMIT_MAX = 100
RANKERS = ("none", "auto", "default-2024-11-15")
NAMES = {
    "kb": "vector_store_id",
    "query": "query",
    "top_k": "max_num_results",
    "score_threshold": "ranking_options.score_threshold",
    "filter": "filters",
}


class OpenAIError(APIException):
    """An answer in OpenAI's error shape; `retry_after` seconds become the Retry-After header
    (DRF's handler reads `wait`)."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(detail=message)
        self.status_code = status_code
        self.body = {"message": message, "type": type, "param": param, "code": code}
        self.wait = retry_after


# A refused search's (type, code); its status is the failure's. OpenAI's 404 carries no code.
ERROR_TYPES: dict[Kind, tuple[str, str | None]] = {
    Kind.INVALID: ("invalid_request_error", None),
    Kind.NOT_FOUND: ("invalid_request_error", None),
    Kind.HISTORY_FORBIDDEN: ("invalid_request_error", Kind.HISTORY_FORBIDDEN.value),
    Kind.RATE_LIMITED: ("requests", "rate_limit_exceeded"),
    Kind.SEARCH_UNAVAILABLE: ("server_error", "service_unavailable"),
    Kind.PROVIDER_UNAVAILABLE: ("server_error", "service_unavailable"),
    Kind.PROVIDER_REFUSED: ("server_error", None),
}


def refusal(failure: SearchFailure, vector_store_id: str = "") -> OpenAIError:
    """A refused search in OpenAI's shape: `param` names the field by OpenAI's names, and
    OpenAI's own words for a vector store that is not there (or not this key's) and for a
    spent rate limit."""
    if failure.kind is Kind.NOT_FOUND:
        return _not_found(vector_store_id)
    type, code = ERROR_TYPES[failure.kind]
    param = None
    message = failure.message
    if failure.kind is Kind.INVALID:
        param = caller_place(failure, NAMES)
    elif failure.kind is Kind.RATE_LIMITED:
        message = f"Rate limit reached; retry after {failure.retry_after} s."
    return OpenAIError(
        failure.status,
        message,
        type=type,
        param=param,
        code=code,
        retry_after=failure.retry_after,
    )


def _errors(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every error of this door as {"error": {"message", "type", "param", "code"}} (DRF's
    handler first, for its headers: WWW-Authenticate on a 401, Retry-After on a 429)."""
    if isinstance(exc, Http404):  # as DRF's handler reads it, so its NotFound is answered here
        exc = NotFound()
    elif isinstance(exc, Throttled):  # the read budget, spent before the view
        exc = refusal(rate_limited(getattr(exc, "wait", None)))
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, OpenAIError):
        body = exc.body
    elif isinstance(exc, KeyRefused):
        response.status_code = 401
        body = _body(
            "Incorrect API key provided: it is unknown, expired or revoked.",
            code="invalid_api_key",
        )
    elif isinstance(exc, NotAuthenticated | AuthenticationFailed):
        response.status_code = 401
        body = _body(
            "You didn't provide an API key: send 'Authorization: Bearer <API key>'.",
            code="invalid_api_key",
        )
    elif isinstance(exc, ValidationError):
        place, text = first_error(exc.detail)
        body = _body(f"{place}: {text}" if place else text, param=place)
        response.status_code = 400
    elif isinstance(exc, APIException):
        server = response.status_code >= 500
        body = _body(
            str(exc.detail),
            type="server_error" if server else "invalid_request_error",
            code=None if response.status_code == 404 else getattr(exc, "default_code", None),
        )
    else:
        return response
    response.data = {"error": body}
    return response


def _body(
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    return {"message": message, "type": type, "param": param, "code": code}


# --- shapes ---------------------------------------------------------------------------------


class ErrorBody(serializers.Serializer):
    message = serializers.CharField()
    type = serializers.CharField()
    param = serializers.CharField(allow_null=True)
    code = serializers.CharField(allow_null=True)


class OpenAIErrorOutput(serializers.Serializer):
    error = ErrorBody()


class FileCounts(serializers.Serializer):
    in_progress = serializers.IntegerField()
    completed = serializers.IntegerField()
    failed = serializers.IntegerField()
    cancelled = serializers.IntegerField()
    total = serializers.IntegerField()


class VectorStoreOutput(serializers.Serializer):
    id = serializers.CharField(help_text="The knowledge base's slug.")
    object = serializers.ChoiceField(choices=["vector_store"])
    created_at = serializers.IntegerField(help_text="Unix seconds.")
    name = serializers.CharField()
    usage_bytes = serializers.IntegerField(
        help_text="The size of the live revisions' files of the documents this key may read."
    )
    file_counts = FileCounts()
    status = serializers.ChoiceField(choices=["completed"])
    last_active_at = serializers.IntegerField(allow_null=True)
    expires_after = serializers.JSONField(allow_null=True)
    expires_at = serializers.IntegerField(allow_null=True)
    metadata = serializers.DictField(child=serializers.CharField())


class VectorStoreListOutput(serializers.Serializer):
    object = serializers.ChoiceField(choices=["list"])
    data = VectorStoreOutput(many=True)  # type: ignore[assignment]  # a field, not .data
    first_id = serializers.CharField(allow_null=True)
    last_id = serializers.CharField(allow_null=True)
    has_more = serializers.BooleanField()


class VectorStoreListInput(serializers.Serializer):
    limit = serializers.IntegerField(min_value=1, max_value=LIST_LIMIT_MAX, default=20)
    order = serializers.ChoiceField(choices=["asc", "desc"], default="desc")
    after = serializers.CharField(required=False, max_length=100)
    before = serializers.CharField(required=False, max_length=100)


_COMPARISON = {
    "type": "object",
    "required": ["type", "key", "value"],
    "properties": {
        "type": {"type": "string", "enum": ["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"]},
        "key": {"type": "string"},
        "value": {
            "oneOf": [
                {"type": "string"},
                {"type": "number"},
                {"type": "boolean"},
                {"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "number"}]}},
            ]
        },
    },
}
_FILTERS_SCHEMA = {
    "description": "OpenAI's filters: a comparison {type: eq|ne|gt|gte|lt|lte|in|nin, key, "
    "value} or a compound {type: and|or, filters: [...]}, nested up to 5 levels. Keys: the "
    "knowledge base's declared metadata fields, the built-in key, title, content_type, "
    "created, updated, revision, and the attributes every result carries: kb, document_key, "
    'document_id. A date is "YYYY-MM-DD" or a Unix time in seconds (its UTC date); a number '
    "may be written as text.",
    "oneOf": [
        _COMPARISON,
        {
            "type": "object",
            "required": ["type", "filters"],
            "properties": {
                "type": {"type": "string", "enum": ["and", "or"]},
                "filters": {"type": "array", "minItems": 1, "items": {"type": "object"}},
            },
        },
    ],
}


@extend_schema_field(_FILTERS_SCHEMA)
class Filters(serializers.JSONField):
    pass


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "minLength": 1},
            {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        ]
    }
)
class Query(serializers.Field):
    """A string, or a list of strings searched as one query (joined by spaces)."""

    def to_internal_value(self, data: Any) -> list[str]:
        queries = [data] if isinstance(data, str) else data
        if (
            not isinstance(queries, list)
            or not queries
            or not all(isinstance(q, str) and q.strip() for q in queries)
        ):
            raise serializers.ValidationError("Give a query: a string, or a list of strings.")
        return [q.strip() for q in queries]

    def to_representation(self, value: Any) -> Any:
        return value


class RankingOptions(serializers.Serializer):
    ranker = serializers.ChoiceField(
        choices=RANKERS,
        default="auto",
        help_text="none: no reranking; auto or default-2024-11-15: Canon's reranker when one "
        "is configured.",
    )
    score_threshold = serializers.FloatField(
        min_value=0,
        max_value=1,
        required=False,
        help_text="Only results scoring at least this (the learned fusion's score, 0 to 1, "
        "whatever the server's CANON_HYBRID_FUSION).",
    )


class VectorStoreSearchInput(serializers.Serializer):
    query = Query()
    max_num_results = serializers.IntegerField(min_value=1, max_value=MAX_NUM_RESULTS, default=10)
    filters = Filters(required=False, allow_null=True)
    ranking_options = RankingOptions(required=False)
    rewrite_query = serializers.BooleanField(
        default=False,
        help_text="Accepted and ignored: Canon does not rewrite queries (`search_query` in the "
        "answer is what was searched).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({unknown[0]: ["Unrecognized request argument."]})
        return attrs


class TextContent(serializers.Serializer):
    type = serializers.ChoiceField(choices=["text"])
    text = serializers.CharField()


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {
            "oneOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]
        },
    }
)
class Attributes(serializers.DictField):
    pass


class SearchResultOutput(serializers.Serializer):
    file_id = serializers.CharField(help_text="doc_<document id>.")
    filename = serializers.CharField()
    score = serializers.FloatField()
    attributes = Attributes(
        help_text="The document's scalar metadata, then Canon's: kb, document_key, "
        "document_id, title, revision, chunk_id, heading_path, page (where the file has "
        "pages), citation_url."
    )
    content = TextContent(many=True)


class VectorStoreSearchOutput(serializers.Serializer):
    object = serializers.ChoiceField(choices=["vector_store.search_results.page"])
    search_query = serializers.ListField(child=serializers.CharField())
    data = SearchResultOutput(many=True)  # type: ignore[assignment]  # a field, not .data
    has_more = serializers.BooleanField()
    next_page = serializers.CharField(allow_null=True)


# --- answers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileStats:
    total: int = 0
    completed: int = 0
    usage_bytes: int = 0


def file_stats(principal: Principal, kbs: list[KnowledgeBase]) -> dict[int, FileStats]:
    """By knowledge base: the documents the principal may read (not deleted), how many are live
    in the active index version, and their live files' bytes. Two grouped queries."""
    ids = [kb.pk for kb in kbs]
    documents = readable_documents(principal=principal).filter(
        kb_id__in=ids, deleted_at__isnull=True
    )
    totals = dict(documents.values("kb_id").annotate(n=Count("id")).values_list("kb_id", "n"))
    live = (
        Publication.objects.filter(
            kb_id__in=ids,
            index_version_id=F("kb__active_index_version_id"),
            document__in=documents,
        )
        .values("kb_id")
        .annotate(n=Count("id"), size=Sum("build__revision__size"))
        .values_list("kb_id", "n", "size")
    )
    stats = {kb_id: FileStats(total=totals.get(kb_id, 0)) for kb_id in ids}
    for kb_id, n, size in live:
        stats[kb_id] = FileStats(total=stats[kb_id].total, completed=n, usage_bytes=size or 0)
    return stats


def vector_store(kb: KnowledgeBase, stats: FileStats) -> dict[str, Any]:
    version = kb.active_index_version
    metadata = {"description": kb.description[:512]} if kb.description else {}
    if version is not None:
        metadata.update(embedding_model=version.model[:512], index_version=str(version.number))
    return {
        "id": kb.slug,
        "object": "vector_store",
        "created_at": int(kb.created_at.timestamp()),
        "name": kb.name,
        "usage_bytes": stats.usage_bytes,
        "file_counts": {
            "in_progress": stats.total - stats.completed,
            "completed": stats.completed,
            "failed": 0,
            "cancelled": 0,
            "total": stats.total,
        },
        "status": "completed",
        "last_active_at": None,
        "expires_after": None,
        "expires_at": None,
        "metadata": metadata,
    }


def result(hit: Hit, kb: str, facts: DocumentFacts | None) -> dict[str, Any]:
    """One hit as an OpenAI search result."""
    attributes: dict[str, Any] = {
        name: value
        for name, value in (facts.metadata if facts else {}).items()
        if isinstance(value, str | int | float | bool)
    }
    citation = citation_of(hit)
    location = hit.location or {}
    canon: dict[str, Any] = {
        "kb": hit.kb or kb,
        "document_key": hit.document_key,
        "document_id": hit.document_id,
        "title": hit.document_title,
        "revision": hit.revision,
        "chunk_id": hit.chunk_id,
        "heading_path": hit.heading_path,
        "page": location.get("first") if location.get("unit") == "page" else None,
        "citation_url": citation["url"] if citation else None,
    }
    attributes.update({name: value for name, value in canon.items() if value not in (None, "")})
    return {
        "file_id": f"doc_{hit.document_id}",
        "filename": (facts.original_name if facts else "") or hit.document_key,
        "score": float(hit.score),
        "attributes": attributes,
        "content": [{"type": "text", "text": hit.text}],
    }


# --- views ----------------------------------------------------------------------------------

_ERRORS = {
    400: "Invalid request; `error.param` names the field.",
    401: "No API key, or one that is unknown, expired or revoked.",
    404: "No such vector store, or not one this key may search (never told apart).",
    429: "Rate limited; retry after `Retry-After` seconds.",
    503: "Search or the embedding provider unavailable; retry after `Retry-After` seconds.",
}


def _responses(*statuses: int) -> dict[int, OpenApiResponse]:
    return {
        code: OpenApiResponse(OpenAIErrorOutput, description=_ERRORS[code])
        for code in sorted({401, 429, *statuses})
    }


class _OpenAIView(APIView):
    authentication_classes = [BearerKeyAuthentication]
    schema = CompatSchema()
    permission_classes = [HasPrincipal]
    rate_scope = READ

    def get_exception_handler(self) -> Any:
        return _errors

    @staticmethod
    def principal(request: Request) -> Principal:
        principal = request_principal(request)
        assert principal is not None  # HasPrincipal
        return principal


def _not_found(ref: str) -> OpenAIError:
    """OpenAI's 404 for a vector store, word for word: `code` null (its clients read the
    status; `openai.NotFoundError`)."""
    return OpenAIError(404, f"No vector store found with id '{ref}'.")


VECTOR_STORE_EXAMPLE = {
    "id": "handbook",
    "object": "vector_store",
    "created_at": 1767225600,
    "name": "Handbook",
    "usage_bytes": 123456,
    "file_counts": {"in_progress": 1, "completed": 41, "failed": 0, "cancelled": 0, "total": 42},
    "status": "completed",
    "last_active_at": None,
    "expires_after": None,
    "expires_at": None,
    "metadata": {"embedding_model": "bge-m3", "index_version": "3"},
}


class VectorStoreListView(_OpenAIView):
    @extend_schema(
        operation_id="openai_vector_stores_list",
        tags=["compatibility"],
        parameters=[VectorStoreListInput],
        responses={200: VectorStoreListOutput, **_responses(400)},
        examples=[
            OpenApiExample(
                "list",
                value={
                    "object": "list",
                    "data": [VECTOR_STORE_EXAMPLE],
                    "first_id": "handbook",
                    "last_id": "handbook",
                    "has_more": False,
                },
                response_only=True,
            )
        ],
        description="OpenAI's list of vector stores: the knowledge bases this key may search.",
    )
    def get(self, request: Request) -> Response:
        principal = self.principal(request)
        # DRF reads a blank query parameter as an absent one; here it is refused, as is an
        # unknown one (a misspelt `limit` is not silently the default).
        for name, value in request.query_params.items():
            if name not in VectorStoreListInput().fields:
                raise OpenAIError(400, f"Unrecognized query parameter: {name!r}.", param=name)
            if not value:
                raise OpenAIError(400, f"{name}: give a value.", param=name)
        params = VectorStoreListInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        kbs = sorted(knowledge_bases(principal=principal), key=lambda kb: (kb.created_at, kb.pk))
        if data["order"] == "desc":
            kbs.reverse()
        slugs = [kb.slug for kb in kbs]
        start, end = 0, len(kbs)
        if "after" in data:
            start = slugs.index(data["after"]) + 1 if data["after"] in slugs else len(kbs)
        if "before" in data:
            end = slugs.index(data["before"]) if data["before"] in slugs else 0
        window = kbs[start:end]  # empty when a cursor names none of them (module docstring)
        limit = data["limit"]
        # `before` pages backwards: the `limit` stores nearest it.
        page = window[-limit:] if "before" in data and "after" not in data else window[:limit]
        stats = file_stats(principal, page)
        return Response(
            {
                "object": "list",
                "data": [vector_store(kb, stats[kb.pk]) for kb in page],
                "first_id": page[0].slug if page else None,
                "last_id": page[-1].slug if page else None,
                "has_more": len(page) < len(window),
            }
        )


class VectorStoreDetailView(_OpenAIView):
    @extend_schema(
        operation_id="openai_vector_stores_retrieve",
        tags=["compatibility"],
        parameters=[
            OpenApiParameter(
                "vector_store_id",
                OpenApiTypes.STR,
                OpenApiParameter.PATH,
                description="The knowledge base's slug (or id).",
            )
        ],
        responses={200: VectorStoreOutput, **_responses(404)},
        examples=[OpenApiExample("vector store", value=VECTOR_STORE_EXAMPLE, response_only=True)],
        description="OpenAI's vector store: a knowledge base this key may search.",
    )
    def get(self, request: Request, vector_store_id: str) -> Response:
        principal = self.principal(request)
        try:
            kb = knowledge_base_for(principal=principal, kb_ref=vector_store_id)
        except KnowledgeBaseNotFound as exc:
            raise _not_found(vector_store_id) from exc
        return Response(vector_store(kb, file_stats(principal, [kb])[kb.pk]))


SEARCH_REQUEST_EXAMPLE = {
    "query": "How many vacation days do employees get?",
    "max_num_results": 5,
    "filters": {
        "type": "and",
        "filters": [
            {"type": "eq", "key": "department", "value": "hr"},
            {"type": "gte", "key": "year", "value": 2025},
        ],
    },
    "ranking_options": {"ranker": "auto", "score_threshold": 0.3},
}
SEARCH_RESPONSE_EXAMPLE = {
    "object": "vector_store.search_results.page",
    "search_query": ["How many vacation days do employees get?"],
    "data": [
        {
            "file_id": "doc_42",
            "filename": "vacation.pdf",
            "score": 0.91,
            "attributes": {
                "department": "hr",
                "year": 2026,
                "kb": "handbook",
                "document_key": "vacation",
                "document_id": 42,
                "title": "Vacation policy",
                "revision": 3,
                "chunk_id": 1234,
                "heading_path": "Leave › Vacation",
                "page": 2,
                "citation_url": "/api/v1/documents/42/revisions/3/text?start=120&end=181",
            },
            "content": [
                {"type": "text", "text": "Every employee has thirty days of paid vacation."}
            ],
        }
    ],
    "has_more": False,
    "next_page": None,
}


class VectorStoreSearchView(_OpenAIView):
    @extend_schema(
        operation_id="openai_vector_stores_search",
        tags=["compatibility"],
        parameters=[
            OpenApiParameter(
                "vector_store_id",
                OpenApiTypes.STR,
                OpenApiParameter.PATH,
                description="The knowledge base's slug (or id).",
            )
        ],
        request=VectorStoreSearchInput,
        responses={200: VectorStoreSearchOutput, **_responses(400, 404, 503)},
        examples=[
            OpenApiExample("request", value=SEARCH_REQUEST_EXAMPLE, request_only=True),
            OpenApiExample("response", value=SEARCH_RESPONSE_EXAMPLE, response_only=True),
        ],
        description="OpenAI's vector-store search: a hybrid search of the knowledge base as "
        "this key sees it (its access groups), one result per chunk.",
    )
    def post(self, request: Request, vector_store_id: str) -> Response:
        principal = self.principal(request)
        if not isinstance(request.data, dict):
            raise OpenAIError(400, "The body is a JSON object.")
        params = VectorStoreSearchInput(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        ranking = data.get("ranking_options") or {}
        body: dict[str, Any] = {
            "kb": vector_store_id,
            "query": " ".join(data["query"]),
            "top_k": min(data["max_num_results"], settings.SEARCH_MAX_TOP_K),
            "mode": "hybrid",
            "rerank": ranking.get("ranker", "auto") != "none",
        }
        if ranking.get("score_threshold") is not None:
            body["score_threshold"] = ranking["score_threshold"]
        try:
            if data.get("filters") is not None:
                body["filter"] = from_openai(data["filters"])
            found = search_request(principal=principal, body=body, fusion=FUSION)
        except SearchRefused as exc:
            raise refusal(exc.failure, vector_store_id) from exc
        except FilterError as exc:  # filters, before the search
            raise refusal(filter_invalid(exc)) from exc
        facts = document_facts(found.hits)
        return Response(
            {
                "object": "vector_store.search_results.page",
                "search_query": data["query"],
                "data": [result(hit, found.kb, facts.get(hit.build_id)) for hit in found.hits],
                "has_more": False,
                "next_page": None,
            },
            status=status.HTTP_200_OK,
        )
