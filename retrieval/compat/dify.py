"""Dify's External Knowledge API: `POST {endpoint}/retrieval`, so a Dify app can use a Canon
knowledge base as its external knowledge (register `https://canon.example/api/dify` as the
endpoint, a Canon API key as the API key, and the knowledge base's slug as the knowledge ID).

The request, as Dify sends it: {"knowledge_id", "query", "retrieval_setting": {"top_k",
"score_threshold"}, "metadata_condition"?}; the answer {"records": [{"content", "score",
"title", "metadata"}]}. Errors are {"error_code", "error_msg"}: Dify's own codes 1001 (the
Authorization header is not `Bearer <key>`, 403), 1002 (the key is refused, 403) and 2001 (the
knowledge does not exist, 404: also a knowledge base this key may not search), and Canon's for
what Dify's list does not cover: 3001 (invalid request, 400), 3002 (rate limited, 429, with
Retry-After) and 5001 (search or the embedding provider unavailable, 503, with Retry-After).

The search is hybrid, always, fused by the learned fusion whatever CANON_HYBRID_FUSION says
(`common.FUSION`): Dify's `score_threshold` is a relevance "from 0 to 1", and the learned
fusion's score is the one Canon score on that scale (the estimate that the passage answers the
query; a vector score is a cosine from -1, a keyword score BM25 with no top, an `rrf` fused
score below 0.033), hybrid ranks best on Canon's evaluation, and Dify offers no mode to choose.
Dify sends 0.0 when its threshold is off, which keeps every hit.

`metadata_condition` takes what a running Dify sends (`filters.shapes.from_dify`): numbers, or
numbers as text; dates as "YYYY-MM-DD" or Unix seconds (Dify's time metadata); `in` / `not in`
a list or comma-separated text. A document without the field matches no negative operator
(`not contains`, `is not`, `≠`, `not in`), as in Dify's own knowledge bases; `empty` finds it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import Http404
from drf_spectacular.utils import (
    OpenApiExample,
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
from retrieval.filters import FilterError
from retrieval.filters.shapes import from_dify
from retrieval.search.hits import Hit

MALFORMED_AUTHORIZATION = 1001
AUTHORIZATION_FAILED = 1002
KNOWLEDGE_NOT_FOUND = 2001
INVALID_REQUEST = 3001
RATE_LIMITED = 3002
UNAVAILABLE = 5001

# SearchInput's fields under Dify's names, for its error messages.
NAMES = {
    "kb": "knowledge_id",
    "query": "query",
    "top_k": "retrieval_setting.top_k",
    "score_threshold": "retrieval_setting.score_threshold",
    "filter": "metadata_condition",
}


class DifyError(APIException):
    """An answer in Dify's error shape; `retry_after` seconds become the Retry-After header
    (DRF's handler reads `wait`)."""

    def __init__(
        self, status_code: int, error_code: int, message: str, *, retry_after: int | None = None
    ) -> None:
        super().__init__(detail=message)
        self.status_code = status_code
        self.error_code = error_code
        self.message = message
        self.wait = retry_after


# A refused search's error_code; its status is the failure's.
ERROR_CODES = {
    Kind.INVALID: INVALID_REQUEST,
    Kind.NOT_FOUND: KNOWLEDGE_NOT_FOUND,
    Kind.HISTORY_FORBIDDEN: INVALID_REQUEST,  # as_of is not in Dify's request
    Kind.RATE_LIMITED: RATE_LIMITED,
    Kind.SEARCH_UNAVAILABLE: UNAVAILABLE,
    Kind.PROVIDER_UNAVAILABLE: UNAVAILABLE,
    Kind.PROVIDER_REFUSED: UNAVAILABLE,
}


def refusal(failure: SearchFailure) -> DifyError:
    """A refused search in Dify's shape: the problem named by Dify's field names, and Dify's
    own words for a knowledge base that is not there (or not this key's)."""
    if failure.kind is Kind.INVALID:
        place = caller_place(failure, NAMES)
        message = f"{place}: {failure.message}" if place else failure.message
    elif failure.kind is Kind.NOT_FOUND:
        message = "The knowledge does not exist."
    else:
        message = failure.message
    return DifyError(
        failure.status, ERROR_CODES[failure.kind], message, retry_after=failure.retry_after
    )


def _errors(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every error of this door as {"error_code", "error_msg"} (DRF's handler first, for its
    headers: Retry-After on a 429)."""
    if isinstance(exc, Http404):  # as DRF's handler reads it, so its NotFound is answered here
        exc = NotFound()
    elif isinstance(exc, Throttled):  # the read budget, spent before the view
        exc = refusal(rate_limited(getattr(exc, "wait", None)))
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, DifyError):
        status_code, code, message = exc.status_code, exc.error_code, exc.message
    elif isinstance(exc, KeyRefused):
        status_code, code, message = 403, AUTHORIZATION_FAILED, str(exc.detail)
    elif isinstance(exc, NotAuthenticated | AuthenticationFailed):  # no header, or malformed
        status_code, code = 403, MALFORMED_AUTHORIZATION
        message = "Invalid Authorization header format. Expected 'Bearer <api-key>' format."
    elif isinstance(exc, ValidationError):
        place, text = first_error(exc.detail)
        status_code, code = 400, INVALID_REQUEST
        message = f"{place}: {text}" if place else text
    elif isinstance(exc, APIException):
        status_code = response.status_code
        code = UNAVAILABLE if status_code >= 500 else INVALID_REQUEST
        message = str(exc.detail)
    else:
        return response
    response.status_code = status_code
    response.data = {"error_code": code, "error_msg": message}
    if "WWW-Authenticate" in response:
        del response["WWW-Authenticate"]
    return response


# --- shapes ---------------------------------------------------------------------------------


class RetrievalSetting(serializers.Serializer):
    top_k = serializers.IntegerField(
        min_value=1,
        max_value=settings.SEARCH_MAX_TOP_K,
        help_text="The most records to return.",
    )
    score_threshold = serializers.FloatField(
        min_value=0,
        max_value=1,
        default=0.0,
        help_text="Only records scoring at least this (the learned fusion's score, 0 to 1, "
        "whatever the server's CANON_HYBRID_FUSION); 0.0, what Dify sends when its threshold "
        "is off, keeps every record.",
    )


_CONDITION_SCHEMA = {
    "type": "object",
    "nullable": True,
    "description": "Only documents whose metadata match. Each condition names fields (a "
    "condition on several holds when any matches); operators: contains, not contains, start "
    "with, end with, is, is not, =, ≠, >, <, ≥, ≤, before, after, in, not in (a list, or "
    "comma-separated text), empty, not empty. Numbers may come as text; dates as YYYY-MM-DD or "
    "Unix seconds (their UTC date). A document without the field matches no negative operator "
    "(not contains, is not, ≠, not in); empty finds it. Fields: the knowledge base's declared "
    "metadata fields, the built-in key, title, content_type, created, updated, revision, and "
    "document_key, document_id, kb.",
    "required": ["conditions"],
    "properties": {
        "logical_operator": {"type": "string", "enum": ["and", "or"], "default": "and"},
        "conditions": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "comparison_operator"],
                "properties": {
                    "name": {
                        "oneOf": [
                            {"type": "string", "minLength": 1},
                            {
                                "type": "array",
                                "minItems": 1,
                                "items": {"type": "string"},
                            },
                        ]
                    },
                    "comparison_operator": {"type": "string"},
                    "value": {},
                },
            },
        },
    },
}


@extend_schema_field(_CONDITION_SCHEMA)
class MetadataCondition(serializers.JSONField):
    pass


class DifyRetrievalInput(serializers.Serializer):
    knowledge_id = serializers.CharField(
        max_length=100, help_text="The knowledge base's slug (or id) in Canon."
    )
    query = serializers.CharField(max_length=settings.SEARCH_MAX_QUERY_CHARS)
    retrieval_setting = RetrievalSetting()
    metadata_condition = MetadataCondition(required=False, allow_null=True)


class DifyRecord(serializers.Serializer):
    content = serializers.CharField(help_text="The chunk's text.")
    score = serializers.FloatField(help_text="The learned fusion's score, 0 to 1.")
    title = serializers.CharField(help_text="The document's title (its key when it has none).")
    metadata = serializers.DictField(
        help_text="The document's own metadata, then Canon's: path and document_key (the "
        "document's key), document_id, title, revision, kb, chunk_id, heading_path, location "
        "(pages, slides or rows), file_name, and citation_url (the revision's text the chunk "
        "stands on, served while the revision is retained)."
    )


class DifyRetrievalOutput(serializers.Serializer):
    records = DifyRecord(many=True)


class DifyErrorOutput(serializers.Serializer):
    error_code = serializers.IntegerField(
        help_text="1001 malformed Authorization header, 1002 authorization failed, 2001 the "
        "knowledge does not exist; Canon's own: 3001 invalid request, 3002 rate limited, 5001 "
        "unavailable."
    )
    error_msg = serializers.CharField()


def record(hit: Hit, kb: str, facts: DocumentFacts | None) -> dict[str, Any]:
    """One hit as a Dify record."""
    citation = citation_of(hit)
    canon: dict[str, Any] = {
        "path": hit.document_key,
        "document_key": hit.document_key,
        "document_id": hit.document_id,
        "title": hit.document_title,
        "revision": hit.revision,
        "kb": hit.kb or kb,
        "chunk_id": hit.chunk_id,
        "heading_path": hit.heading_path,
        "location": hit.location,
        "file_name": facts.original_name if facts else None,
        "citation_url": citation["url"] if citation else None,
    }
    metadata = dict(facts.metadata) if facts else {}
    metadata.update({name: value for name, value in canon.items() if value not in (None, "")})
    return {
        "content": hit.text,
        "score": float(hit.score),
        "title": hit.document_title or hit.document_key,
        "metadata": metadata,
    }


# --- the view -------------------------------------------------------------------------------

REQUEST_EXAMPLE = {
    "knowledge_id": "handbook",
    "query": "How many vacation days do employees get?",
    "retrieval_setting": {"top_k": 2, "score_threshold": 0.5},
    "metadata_condition": {
        "logical_operator": "and",
        "conditions": [{"name": ["department"], "comparison_operator": "is", "value": "hr"}],
    },
}
RESPONSE_EXAMPLE = {
    "records": [
        {
            "content": "Every employee has thirty days of paid vacation per year.",
            "score": 0.91,
            "title": "Vacation policy",
            "metadata": {
                "department": "hr",
                "path": "vacation",
                "document_key": "vacation",
                "document_id": 42,
                "title": "Vacation policy",
                "revision": 3,
                "kb": "handbook",
                "chunk_id": 1234,
                "heading_path": "Leave › Vacation",
                "location": {"unit": "page", "first": 2, "last": 2},
                "file_name": "vacation.pdf",
                "citation_url": "/api/v1/documents/42/revisions/3/text?start=120&end=181",
            },
        }
    ]
}


def _error(description: str, code: int, message: str) -> OpenApiResponse:
    return OpenApiResponse(
        DifyErrorOutput,
        description=description,
        examples=[
            OpenApiExample(str(code), value={"error_code": code, "error_msg": message}),
        ],
    )


class DifyRetrievalView(APIView):
    authentication_classes = [BearerKeyAuthentication]
    schema = CompatSchema()
    permission_classes = [HasPrincipal]
    rate_scope = READ  # a search: the REST search's read budget

    def get_exception_handler(self) -> Any:
        return _errors

    @extend_schema(
        operation_id="dify_retrieval",
        tags=["compatibility"],
        request=DifyRetrievalInput,
        responses={
            200: DifyRetrievalOutput,
            400: _error("Invalid request (3001).", 3001, "retrieval_setting.top_k: Ensure..."),
            403: _error(
                "1001: no or malformed Authorization header; 1002: the key is refused.",
                1002,
                "Authorization failed: the API key is unknown, expired or revoked.",
            ),
            404: _error(
                "2001: no such knowledge base, or not one this key may search.",
                2001,
                "The knowledge does not exist.",
            ),
            429: _error("Rate limited (3002); retry after Retry-After.", 3002, "Rate limited."),
            503: _error(
                "Search or the embedding provider unavailable (5001); retry after Retry-After.",
                5001,
                "Search is unavailable; try again.",
            ),
        },
        examples=[
            OpenApiExample("request", value=REQUEST_EXAMPLE, request_only=True),
            OpenApiExample("response", value=RESPONSE_EXAMPLE, response_only=True),
        ],
        description="Dify's External Knowledge API: register `{host}/api/dify` as the "
        "endpoint (Dify appends /retrieval), a Canon API key as its API key and a knowledge "
        "base's slug as the knowledge ID. A hybrid search of that knowledge base as the key "
        "sees it (its access groups), records in Dify's shape.",
    )
    def post(self, request: Request) -> Response:
        principal = request_principal(request)
        assert principal is not None  # HasPrincipal
        if not isinstance(request.data, dict):
            raise DifyError(400, INVALID_REQUEST, "The body is a JSON object.")
        params = DifyRetrievalInput(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        setting = data["retrieval_setting"]
        body: dict[str, Any] = {
            "kb": data["knowledge_id"],
            "query": data["query"],
            "top_k": setting["top_k"],
            "mode": "hybrid",
            "score_threshold": setting["score_threshold"],
        }
        try:
            if data.get("metadata_condition") is not None:
                body["filter"] = from_dify(data["metadata_condition"])
            result = search_request(principal=principal, body=body, fusion=FUSION)
        except SearchRefused as exc:
            raise refusal(exc.failure) from exc
        except FilterError as exc:  # metadata_condition, before the search
            raise refusal(filter_invalid(exc)) from exc
        facts = document_facts(result.hits)
        records = [record(hit, result.kb, facts.get(hit.build_id)) for hit in result.hits]
        return Response({"records": records}, status=status.HTTP_200_OK)
