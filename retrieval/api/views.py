"""The API (/api/v1/). Views validate input with small serializers, call selectors (reads) and
services (writes), and shape the answer. Anything outside the principal's tenant, knowledge
bases or access groups is answered exactly like something that does not exist: 404."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import APIException, NotAuthenticated, NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from kb.metadata import MetadataInvalid
from kb.models import KnowledgeBase
from kb.selectors.metadata import metadata_summary
from kb.uploads import SKIPPED_ATTR, stop_at_first_oversized
from retrieval.api import parsers, uploads
from retrieval.api.auth import request_principal
from retrieval.api.search_request import (
    Kind,
    SearchFailure,
    SearchRefused,
    not_found,
    search_request,
)
from retrieval.api.serializers import (
    DocumentDetailOutput,
    DocumentPageInput,
    DocumentPageOutput,
    DocumentUploadInput,
    ErrorOutput,
    ExplainOutput,
    KnowledgeBaseListOutput,
    MetadataSummaryOutput,
    SearchInput,
    SearchOutput,
    UploadOutput,
    search_body,
)
from retrieval.documents import document_detail, documents_page, knowledge_bases
from retrieval.principals import KnowledgeBaseNotFound, OutOfScope, Principal
from retrieval.search.explain import chunk_explain
from retrieval.search.visibility import knowledge_base_for

logger = logging.getLogger("canon.api")


class Refused(APIException):
    """An answer with the status and code a service chose; `retry_after` seconds become the
    Retry-After header (DRF's handler reads `wait`)."""

    def __init__(
        self, status_code: int, code: str, detail: str, *, retry_after: int | None = None
    ) -> None:
        super().__init__(detail=detail, code=code)
        self.status_code = status_code
        self.default_code = code
        self.wait = retry_after


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, with every error body shaped as {"error": ..., "detail": ...}. Request
    bodies Django refuses while parsing (too many files or fields, too large) are 4xx too."""
    if isinstance(exc, RequestDataTooBig):
        exc = Refused(413, "request_too_large", str(exc) or "The request body is too large.")
    elif isinstance(exc, SuspiciousOperation):
        exc = Refused(400, "bad_request", str(exc) or "The request was refused.")
    response = drf_exception_handler(exc, context)
    if response is not None:
        detail = response.data
        if isinstance(detail, dict) and set(detail) == {"detail"}:
            detail = detail["detail"]
        code = getattr(exc, "default_code", "error")
        response.data = {"error": code, "detail": detail}
    return response


def principal_or_401(request: Request) -> Principal:
    principal = request_principal(request)
    if principal is None:
        raise NotAuthenticated()
    return principal


def kb_or_404(principal: Principal, kb_ref: str) -> KnowledgeBase:
    """The knowledge base `kb_ref` names, or a 404 that says the same for one that does not
    exist and one the principal may not read (every door that takes a `kb` in its path)."""
    try:
        return knowledge_base_for(principal=principal, kb_ref=kb_ref)
    except KnowledgeBaseNotFound as exc:
        raise NotFound(not_found(kb_ref).message) from exc


def _errors(*statuses: int) -> dict[int, OpenApiResponse]:
    descriptions = {
        400: "Invalid input; `detail` says what, per field.",
        401: "Missing, malformed, unknown, expired or revoked API key.",
        403: "Authenticated, but not allowed to do this.",
        404: "Not found (or not visible to this key: never told apart).",
        409: "Conflicts with the current state.",
        413: "The upload is larger than the limit.",
        415: "Unsupported media type.",
        429: "Rate limited; retry after `Retry-After` seconds.",
        502: "The embedding provider refused to embed the query (`provider_refused`): "
        "retrying will not help until an administrator fixes the knowledge base's embedding.",
        503: "Temporarily unavailable (the embedding provider or the search replica); retry "
        "after `Retry-After` seconds.",
    }
    return {
        code: OpenApiResponse(ErrorOutput, description=descriptions[code])
        for code in sorted({401, 429, *statuses})
    }


class SearchView(APIView):
    rate_scope = "read"  # a POST that only reads: it spends the read budget

    @extend_schema(
        operation_id="search",
        request=SearchInput,
        responses={200: SearchOutput, **_errors(400, 403, 404, 502, 503)},
        description="Top chunks visible to this key. Filters narrow what the key may see; "
        "`as_of` answers from the publication history (index admins only). When a reranker is "
        "configured, a hybrid search's fused hits are reordered by it unless `rerank` is false; "
        "if it fails, the answer is still 200, in the fused order, with `reranked: false`.",
    )
    def post(self, request: Request) -> Response:
        principal = principal_or_401(request)
        try:
            result = search_request(principal=principal, body=request.data)
        except SearchRefused as exc:
            raise search_refusal(exc.failure) from exc
        return Response(search_body(result), status=status.HTTP_200_OK)


def search_refusal(failure: SearchFailure) -> APIException:
    """A refused search in the REST API's words: its `error` codes are the failures' own, and
    an invalid body's `detail` names every field at fault."""
    if failure.kind is Kind.INVALID:
        return ValidationError(failure.errors)
    return Refused(failure.status, failure.code, failure.message, retry_after=failure.retry_after)


class ChunkExplainView(APIView):
    @extend_schema(
        operation_id="chunk_explain",
        responses={200: ExplainOutput, **_errors(404)},
        description="Why this chunk is, or is not, returned by search to this key now. A chunk "
        "this key may not read (another tenant, knowledge base or access group) is a 404, the "
        "same as one that does not exist.",
    )
    def get(self, request: Request, chunk_id: int) -> Response:
        principal = principal_or_401(request)
        try:
            explanation = chunk_explain(principal=principal, chunk_id=chunk_id)
        except OutOfScope as exc:
            raise NotFound(f"Chunk {chunk_id} not found.") from exc
        return Response(ExplainOutput(explanation).data)


class KnowledgeBaseListView(APIView):
    @extend_schema(
        operation_id="kb_list",
        responses={200: KnowledgeBaseListOutput, **_errors()},
        description="The knowledge bases this key may search.",
    )
    def get(self, request: Request) -> Response:
        principal = principal_or_401(request)
        kbs = knowledge_bases(principal=principal)
        return Response(KnowledgeBaseListOutput({"results": kbs}).data)


IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=True,
    description="A unique key per upload (1-255 printable ASCII characters). A repeat by the "
    "same API key (or user) with the same key and body returns the first answer, after the "
    "checks a new request passes; with another body, 409. Keys are per API key: another key "
    "sending the same one makes a request of its own.",
)


def idempotent(method: Any) -> Any:
    """Marks a view method whose answers are replayed for an Idempotency-Key (the header it
    reads with `_idempotency_key`, its service keys the record by tenant, principal and key).
    tests/retrieval/test_idempotency.py replays every marked method from other principals."""
    method.idempotent = True
    return method


def _idempotency_key(request: Request) -> str:
    value = request.headers.get("Idempotency-Key", "")
    if not value:
        raise ValidationError({"Idempotency-Key": ["This header is required."]})
    if len(value) > 255 or not all(" " <= ch <= "~" for ch in value):
        raise ValidationError({"Idempotency-Key": ["Use 1-255 printable ASCII characters."]})
    return value


class DocumentListView(APIView):
    parser_classes = [parsers.MultiPartParser]

    @extend_schema(
        operation_id="document_list",
        parameters=[DocumentPageInput],
        responses={200: DocumentPageOutput, **_errors(400, 404)},
        description="Documents of the knowledge base this key may read, by id, one page at a "
        "time (pass `next_cursor` back as `cursor`).",
    )
    def get(self, request: Request, kb: str) -> Response:
        principal = principal_or_401(request)
        params = DocumentPageInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        knowledge_base = kb_or_404(principal, kb)
        page = documents_page(
            principal=principal,
            kb=knowledge_base,
            after_id=params.validated_data.get("cursor"),
            limit=params.validated_data["limit"],
        )
        return Response(DocumentPageOutput(page).data)

    @extend_schema(
        operation_id="document_upload",
        request={"multipart/form-data": DocumentUploadInput},
        parameters=[IDEMPOTENCY_HEADER],
        responses={201: UploadOutput, **_errors(400, 403, 404, 409, 413, 415)},
        description="Upload a new document, or a new revision of the document with this key. "
        "A key taken by a document you cannot write (restricted to groups you do not hold, or "
        "deleted) is a 409 `key_unavailable`, the same whatever the reason.",
    )
    @idempotent
    def post(self, request: Request, kb: str) -> Response:
        principal = principal_or_401(request)
        knowledge_base = kb_or_404(principal, kb)
        idempotency_key = _idempotency_key(request)
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > settings.UPLOAD_MAX_BYTES + 1024 * 1024:
            raise Refused(413, "file_too_large", "The request is larger than the upload limit.")
        # Parsing streams the body; a file past the limit ends it, and the 413 goes out at once.
        stop_at_first_oversized(request._request)
        data = request.data
        if getattr(request._request, SKIPPED_ATTR, None):
            raise Refused(413, "file_too_large", "The file is larger than the upload limit.")
        if len(request.FILES.getlist("file")) > 1:
            raise ValidationError({"file": ["Upload one file per request."]})
        params = DocumentUploadInput(data=data)
        params.is_valid(raise_exception=True)
        values = params.validated_data
        try:
            result = uploads.document_upload(
                principal=principal,
                kb=knowledge_base,
                idempotency_key=idempotency_key,
                key=values["key"],
                upload=values["file"],
                title=values.get("title") if "title" in data else None,
                access_groups=values.get("access_groups", []) if "access_groups" in data else None,
                metadata=values.get("metadata") if "metadata" in data else None,
                actor=request.user,
            )
        except uploads.Refused as exc:
            raise Refused(exc.status, exc.code, exc.message, retry_after=exc.retry_after) from exc
        except MetadataInvalid as exc:
            raise ValidationError({"metadata": {exc.field: [str(exc)]}}) from exc
        headers = {"Idempotent-Replayed": "true"} if result.replayed else {}
        return Response(result.body, status=result.status, headers=headers)


class KnowledgeBaseMetadataView(APIView):
    @extend_schema(
        operation_id="kb_metadata",
        responses={200: MetadataSummaryOutput, **_errors(404)},
        description="The metadata fields the knowledge base declares (and the built-in "
        "content_type), each with how many documents hold a value and its most frequent values "
        "(string, boolean, string_list) or its range (number, date). Counts only the "
        "non-deleted documents this key may read. A knowledge base the key may not search is a "
        "404, the same as one that does not exist.",
    )
    def get(self, request: Request, kb: str) -> Response:
        principal = principal_or_401(request)
        knowledge_base = kb_or_404(principal, kb)
        summary = metadata_summary(kb=knowledge_base, reader=principal)
        return Response(MetadataSummaryOutput((knowledge_base, summary)).data)


class DocumentDetailView(APIView):
    @extend_schema(
        operation_id="document_detail",
        responses={200: DocumentDetailOutput, **_errors(404)},
        description="A document's status, live revision and the builds on their way.",
    )
    def get(self, request: Request, document_id: int) -> Response:
        principal = principal_or_401(request)
        try:
            detail = document_detail(principal=principal, document_id=document_id)
        except OutOfScope as exc:
            raise NotFound(f"Document {document_id} not found.") from exc
        return Response(DocumentDetailOutput(detail).data)

    @extend_schema(
        operation_id="document_delete",
        responses={204: None, **_errors(403, 404)},
        description="Soft delete: invisible to search at once, restorable in the admin within "
        "the retention window.",
    )
    def delete(self, request: Request, document_id: int) -> Response:
        principal = principal_or_401(request)
        try:
            uploads.document_soft_delete(
                principal=principal, document_id=document_id, actor=request.user
            )
        except OutOfScope as exc:
            raise NotFound(f"Document {document_id} not found.") from exc
        except uploads.Refused as exc:
            raise Refused(exc.status, exc.code, exc.message, retry_after=exc.retry_after) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)
