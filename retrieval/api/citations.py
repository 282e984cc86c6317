"""GET /api/v1/documents/{id}/revisions/{n}/text: the span of a revision's extracted text a
citation names (`retrieval.citations.revision_text`), with its input and output serializers."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from retrieval.api.serializers import ErrorOutput
from retrieval.api.views import Refused, _errors, principal_or_401
from retrieval.citations import (
    TEXT_MAX_SPAN,
    BadSpan,
    RevisionNotFound,
    TextGone,
    TextUnavailable,
    revision_text,
)
from retrieval.principals import OutOfScope

# Larger than any text the parse stage keeps (CANON_PARSE_MAX_CHARS): refused as input.
_OFFSET_MAX = 2**31 - 1


class RevisionTextInput(serializers.Serializer):
    start = serializers.IntegerField(
        min_value=0,
        max_value=_OFFSET_MAX,
        required=False,
        help_text="The first character (default 0), as a hit's `char_start` counts it.",
    )
    end = serializers.IntegerField(
        min_value=0,
        max_value=_OFFSET_MAX,
        required=False,
        help_text=f"One past the last character (default: {TEXT_MAX_SPAN} characters on, or "
        f"the end); a span is at most {TEXT_MAX_SPAN} characters.",
    )


class RevisionTextOutput(serializers.Serializer):
    document_id = serializers.IntegerField(source="document.pk")
    document_key = serializers.CharField(source="document.key")
    document_title = serializers.CharField(source="document.title")
    revision = serializers.IntegerField()
    live = serializers.BooleanField(help_text="Whether search serves this revision now.")
    start = serializers.IntegerField()
    end = serializers.IntegerField()
    length = serializers.IntegerField(help_text="The whole extracted text's length.")
    text = serializers.CharField(help_text="The revision's extracted text from start to end.")


_EXAMPLE = {
    "document_id": 42,
    "document_key": "handbook/leave",
    "document_title": "Leave policy",
    "revision": 1,
    "live": False,
    "start": 1180,
    "end": 1342,
    "length": 5210,
    "text": "Parental leave is sixteen weeks at full pay ...",
}


class RevisionTextView(APIView):
    @extend_schema(
        operation_id="revision_text",
        parameters=[RevisionTextInput],
        responses={
            200: RevisionTextOutput,
            **_errors(400, 404),
            410: OpenApiResponse(
                ErrorOutput,
                description="The text is no longer served: the document was purged or "
                "deleted, or the revision is past its knowledge base's retention window "
                "(`error`: purged, deleted, not_retained, text_missing).",
            ),
            503: OpenApiResponse(
                ErrorOutput,
                description="The file store cannot be reached; retry after `Retry-After` seconds.",
            ),
        },
        examples=[OpenApiExample("A cited span", value=_EXAMPLE, response_only=True)],
        description="A span of a revision's extracted text: what a hit's `citation.url` "
        "opens, by the offsets its `char_start`/`char_end` give, for as long as the revision "
        "is retained — after the document has a newer revision too. The access rule is "
        "search's: a document this key may not read is the same 404 as one that does not "
        "exist.",
    )
    def get(self, request: Request, document_id: int, revision: int) -> Response:
        principal = principal_or_401(request)
        params = RevisionTextInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        try:
            span = revision_text(
                principal=principal,
                document_id=document_id,
                revision=revision,
                start=params.validated_data.get("start"),
                end=params.validated_data.get("end"),
            )
        except OutOfScope as exc:
            raise NotFound(f"Document {document_id} not found.") from exc
        except RevisionNotFound as exc:
            raise NotFound(
                f"Document {document_id} has no revision {revision} with extracted text."
            ) from exc
        except TextGone as exc:
            raise Refused(410, exc.code, exc.message) from exc
        except BadSpan as exc:
            raise ValidationError({exc.parameter: [exc.message]}) from exc
        except TextUnavailable as exc:
            response = Response(
                {"error": "storage_unavailable", "detail": str(exc)},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
            )
            response["Retry-After"] = "5"
            return response
        return Response(RevisionTextOutput(span).data)
