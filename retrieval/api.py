"""The search API. Views validate input with small serializers and call selectors."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import serializers, status
from rest_framework.exceptions import NotAuthenticated, NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from retrieval import selectors
from retrieval.auth import request_principal
from retrieval.principals import Principal


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, with every error body shaped as {"error": ..., "detail": ...}."""
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


class SearchInput(serializers.Serializer):
    kb = serializers.CharField(max_length=100)
    query = serializers.CharField(max_length=settings.SEARCH_MAX_QUERY_CHARS, trim_whitespace=True)
    top_k = serializers.IntegerField(min_value=1, max_value=100, default=10)
    mode = serializers.ChoiceField(choices=selectors.MODES, default="hybrid")


class HitOutput(serializers.Serializer):
    chunk_id = serializers.IntegerField()
    score = serializers.FloatField()
    text = serializers.CharField()
    ordinal = serializers.IntegerField()
    document_key = serializers.CharField()
    document_title = serializers.CharField()
    revision = serializers.IntegerField()
    build_id = serializers.IntegerField()


class SearchOutput(serializers.Serializer):
    kb = serializers.CharField()
    index_version = serializers.IntegerField()
    took_ms = serializers.FloatField()
    hits = HitOutput(many=True)


class SearchView(APIView):
    def post(self, request: Request) -> Response:
        principal = principal_or_401(request)
        if not isinstance(request.data, dict):
            raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
        params = SearchInput(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        try:
            kb = selectors.knowledge_base_for(principal=principal, kb_ref=data["kb"])
        except selectors.KnowledgeBaseNotFound as exc:
            raise NotFound(f"Knowledge base {data['kb']!r} not found.") from exc
        result = selectors.search(
            principal=principal, kb=kb, query=data["query"], top_k=data["top_k"], mode=data["mode"]
        )
        return Response(SearchOutput(result).data, status=status.HTTP_200_OK)
