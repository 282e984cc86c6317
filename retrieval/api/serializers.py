"""Small input and output serializers of the API. They validate and shape; they hold no logic."""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any, cast

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from kb.models import KnowledgeBase
from retrieval.citations import citation_of
from retrieval.documents import DocumentDetail, DocumentPage
from retrieval.filters import MAX_CONDITIONS, MAX_DEPTH, OPERATORS
from retrieval.filters.language import HIT_FIELDS, MAX_IN_VALUES
from retrieval.search.context import COLLECTED, MAX_NEIGHBORS, MISSING, SECTION_MAX_CHARS
from retrieval.search.engine import MODES
from retrieval.search.hits import SearchResult
from retrieval.search.rerank import REASONS as RERANK_REASONS
from textkit.extract import accepted_extensions, accepted_kinds

MAX_DOCUMENT_KEYS = 100
MAX_FILTER_CHARS = 20_000
MAX_METADATA_CHARS = 4096
MAX_DOCUMENT_METADATA_CHARS = 65_536
PAGE_LIMIT_DEFAULT = 50
PAGE_LIMIT_MAX = 200


def _no_nul(value: Any) -> None:
    """PostgreSQL text and jsonb cannot hold NUL; refuse it anywhere in a JSON value."""
    if isinstance(value, str):
        if "\x00" in value:
            raise serializers.ValidationError("Null characters are not allowed.")
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_nul(key)
            _no_nul(item)
    elif isinstance(value, list):
        for item in value:
            _no_nul(item)


# --- errors ---------------------------------------------------------------------------------


class ErrorOutput(serializers.Serializer):
    error = serializers.CharField(help_text="A short machine-readable code.")
    detail = serializers.JSONField(help_text="A message, or messages per input field.")


# --- search ---------------------------------------------------------------------------------


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "maxLength": 100},
            {
                "type": "array",
                "items": {"type": "string", "maxLength": 100},
                "minItems": 1,
                "maxItems": settings.SEARCH_MAX_KBS,
            },
        ]
    }
)
class KnowledgeBaseRefs(serializers.Field):
    """A knowledge base's slug (or id), or a list of them: several read in one search."""

    def to_internal_value(self, data: Any) -> str | list[str]:
        if isinstance(data, str):
            return self._one(data)
        if not isinstance(data, list) or not data:
            raise serializers.ValidationError(
                "Give a knowledge base's slug, or a non-empty list of slugs."
            )
        if len(data) > settings.SEARCH_MAX_KBS:
            raise serializers.ValidationError(
                f"One search reads at most {settings.SEARCH_MAX_KBS} knowledge bases."
            )
        refs = [self._one(item) for item in data]
        if len(set(refs)) != len(refs):
            raise serializers.ValidationError("A knowledge base is named twice.")
        return refs if len(refs) > 1 else refs[0]

    @staticmethod
    def _one(item: Any) -> str:
        if not isinstance(item, str):
            raise serializers.ValidationError("A knowledge base is a slug of 1-100 characters.")
        return str(serializers.CharField(max_length=100).run_validation(item))

    def to_representation(self, value: Any) -> Any:
        return value


FILTER_HELP = (
    "Only documents that match this filter, in Canon's filter language: a condition "
    '{"field", "op", "value"} (op: ' + ", ".join(OPERATORS) + ') or {"and": [...]}, '
    '{"or": [...]}, {"not": {...}}, nested up to ' + f"{MAX_DEPTH}"
    " levels (the outermost object counts as one), at most "
    f"{MAX_CONDITIONS} conditions, {MAX_IN_VALUES} values in an in or nin, "
    f"{MAX_FILTER_CHARS:,} characters. Fields: the knowledge base's declared metadata fields, "
    "the built-in key, title, content_type, created, updated, revision, and the fields every "
    "hit carries: " + ", ".join(HIT_FIELDS) + ". A number may be written as text; a date as "
    '"YYYY-MM-DD" or a Unix time in seconds (its UTC date). On a list field, eq holds every '
    "value given (containment) and in any of them (overlap). A document without a field "
    "matches no condition on it but exists false."
)


# The filter language as a JSON schema: a condition's operators listed, so a client reading the
# OpenAPI schema sees every one.
_FILTER_SCHEMA = {
    "type": "object",
    "description": FILTER_HELP,
    "properties": {
        "field": {"type": "string"},
        "op": {"type": "string", "enum": list(OPERATORS)},
        "value": {},
        "and": {"type": "array", "items": {"type": "object"}, "minItems": 1},
        "or": {"type": "array", "items": {"type": "object"}, "minItems": 1},
        "not": {"type": "object"},
    },
}


def _infinite_at(value: Any, place: str) -> str | None:
    """Where in a decoded JSON value a number is infinite or NaN (JSON cannot say either, so it
    came as a literal beyond a double's range, `1e400`), or None. Iterative: no recursion."""
    stack: list[tuple[Any, str]] = [(value, place)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where
        if isinstance(item, dict):
            stack.extend((child, f"{where}.{key}") for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
    return None


@extend_schema_field(_FILTER_SCHEMA)
class FilterField(serializers.JSONField):
    """A filter in Canon's language, as JSON; a number out of range is refused naming its
    place (DRF's JSONField says only "Value must be valid JSON.")."""

    def to_internal_value(self, data: Any) -> Any:
        place = _infinite_at(data, "filter")
        if place is not None:
            raise serializers.ValidationError(
                f"{place}: a number beyond the range of a double (±1.8e308)."
            )
        return super().to_internal_value(data)


class SearchInput(serializers.Serializer):
    kb = KnowledgeBaseRefs(
        help_text="Knowledge base slug (or id), or a list of up to "
        f"{settings.SEARCH_MAX_KBS}: each is read through its own active index version, all in "
        "one snapshot, and every hit names its knowledge base. An unknown one, or one this key "
        "may not search, is a 404."
    )
    query = serializers.CharField(max_length=settings.SEARCH_MAX_QUERY_CHARS, trim_whitespace=True)
    top_k = serializers.IntegerField(min_value=1, max_value=settings.SEARCH_MAX_TOP_K, default=10)
    mode = serializers.ChoiceField(choices=MODES, default="hybrid")
    document_keys = serializers.ListField(
        child=serializers.CharField(max_length=255, trim_whitespace=False),
        allow_empty=False,
        max_length=MAX_DOCUMENT_KEYS,
        required=False,
        help_text="Only these documents (by key).",
    )
    metadata = serializers.DictField(
        required=False,
        help_text="Only documents whose metadata contains this object (JSON containment).",
    )
    filter = FilterField(required=False, help_text=FILTER_HELP)
    score_threshold = serializers.FloatField(
        required=False,
        help_text="Only hits whose score is at least this; fewer than top_k may come back. What "
        "a score is depends on the mode: vector, the cosine similarity (-1 to 1; 1 is the same "
        "direction); keyword, BM25 (0 and up, with no fixed top: it grows with the query's rare "
        "terms); hybrid, the fused score of the server's fusion (CANON_HYBRID_FUSION): learned, "
        "the default, 0 to 1, the estimate that the passage answers the query; convex, 0 to 1, "
        "relative to each leg's best hit; rrf, a reciprocal-rank sum below 2/61 (about 0.033). "
        "With several knowledge bases it applies to each one's own scores, before their lists "
        "are merged.",
    )
    as_of = serializers.DateTimeField(
        required=False,
        help_text="Search what was live at this time (index admins; within the retention window).",
    )
    explain = serializers.BooleanField(
        default=False,
        help_text="Also say why each hit ranks where it does: its rank and score in each leg "
        "and, for hybrid, what the fusion made of them (`ranking`).",
    )

    rerank = serializers.BooleanField(
        default=True,
        help_text="Reorder a hybrid search's fused hits by the configured reranker (when one is "
        "configured: CANON_RERANK_URL); false skips it. The answer's `reranked` says whether "
        "it happened.",
    )
    neighbors = serializers.IntegerField(
        min_value=0,
        max_value=MAX_NEIGHBORS,
        required=False,
        help_text="Also return each hit's `context`: this many chunks either side of it, from "
        "the same build, as one passage (default 0: none).",
    )
    expand = serializers.ChoiceField(
        choices=["section"],
        required=False,
        help_text="`section`: also return each hit's `context`: the chunks around it under the "
        f"same headings, as one passage of at most {SECTION_MAX_CHARS} characters (the hit's "
        "own chunk always whole). Not with `neighbors`.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("neighbors") and attrs.get("expand"):
            raise serializers.ValidationError({"expand": ["Give neighbors or expand, not both."]})
        if isinstance(attrs.get("kb"), list):
            for name in ("as_of", "explain"):
                if attrs.get(name):
                    raise serializers.ValidationError(
                        {name: ["Asks about one knowledge base; name one in kb."]}
                    )
        return attrs

    def validate_filter(self, value: Any) -> Any:
        _no_nul(value)
        if len(json.dumps(value)) > MAX_FILTER_CHARS:
            raise serializers.ValidationError(
                f"The filter is longer than {MAX_FILTER_CHARS} characters."
            )
        return value

    def validate_metadata(self, value: dict[str, Any]) -> dict[str, Any]:
        _no_nul(value)
        if len(json.dumps(value)) > MAX_METADATA_CHARS:
            raise serializers.ValidationError(
                f"The metadata filter is longer than {MAX_METADATA_CHARS} characters."
            )
        return value


_FAST_SEARCH_KEYS = frozenset({"kb", "query", "top_k", "mode", "rerank"})
# The limits the fast path applies are SearchInput's own.
_TOP_K_FIELD = cast(serializers.IntegerField, SearchInput().fields["top_k"])
_KB_MAX = 100  # KnowledgeBaseRefs' limit for one slug
_TOP_K = (int(_TOP_K_FIELD.min_value or 0), int(_TOP_K_FIELD.max_value or 0), _TOP_K_FIELD.default)
_MODE_DEFAULT = SearchInput().fields["mode"].default
_RERANK_DEFAULT = SearchInput().fields["rerank"].default


def _clean_text(value: Any, max_length: int) -> str | None:
    """A CharField's value as SearchInput takes it (whitespace trimmed, not blank, within the
    length, no NUL or surrogate), or None."""
    if type(value) is not str:
        return None
    value = value.strip()
    if not value or len(value) > max_length or "\x00" in value:
        return None
    try:
        value.encode("utf-8")  # an unpaired surrogate cannot be encoded
    except UnicodeEncodeError:
        return None
    return value


def search_input_fast(data: Any) -> dict[str, Any] | None:
    """SearchInput's validated data for the common request (`kb`, `query`, and `top_k`, `mode`
    and `rerank` or their defaults, each of its plain JSON type) without building a DRF serializer,
    which costs more than the rest of the input handling. None for anything else (another
    field, another type, any value SearchInput would refuse): SearchInput then validates it and
    words the errors. tests/retrieval/test_search_fast_path.py holds the two to the same answers."""
    if type(data) is not dict or not data.keys() <= _FAST_SEARCH_KEYS:
        return None
    kb = _clean_text(data.get("kb"), _KB_MAX)
    query = _clean_text(data.get("query"), settings.SEARCH_MAX_QUERY_CHARS)
    top_k = data.get("top_k", _TOP_K[2])
    mode = data.get("mode", _MODE_DEFAULT)
    rerank = data.get("rerank", _RERANK_DEFAULT)
    if kb is None or query is None or type(top_k) is not int or type(mode) is not str:
        return None
    if not _TOP_K[0] <= top_k <= _TOP_K[1] or mode not in MODES or type(rerank) is not bool:
        return None
    return {
        "kb": kb,
        "query": query,
        "top_k": top_k,
        "mode": mode,
        "explain": False,
        "rerank": rerank,
    }


class CitationOutput(serializers.Serializer):
    document_id = serializers.IntegerField()
    revision = serializers.IntegerField()
    start = serializers.IntegerField()
    end = serializers.IntegerField()
    url = serializers.CharField(
        help_text="/api/v1/documents/{document_id}/revisions/{revision}/text?start=..&end=.."
    )


class ContextOutput(serializers.Serializer):
    text = serializers.CharField(
        allow_null=True,
        help_text="The chunks as one passage (overlaps once; between chunks, the document's "
        "own text); null when `unavailable`.",
    )
    hit_start = serializers.IntegerField(
        allow_null=True, help_text="Where the hit's own chunk starts in `text`."
    )
    hit_end = serializers.IntegerField(
        allow_null=True, help_text="Where it ends: text[hit_start:hit_end] is the hit."
    )
    chunks = serializers.ListField(
        child=serializers.IntegerField(),
        min_length=2,
        max_length=2,
        allow_null=True,
        help_text="The first and last chunk ordinals the passage spans.",
    )
    unavailable = serializers.ChoiceField(
        choices=[COLLECTED, MISSING],
        allow_null=True,
        help_text="Why there is no passage: the build's chunks were collected by retention "
        "after the search (`collected`, `missing`); null when there is one.",
    )


class HitOutput(serializers.Serializer):
    chunk_id = serializers.IntegerField()
    kb = serializers.CharField(help_text="The knowledge base (slug) the hit comes from.")
    score = serializers.FloatField()
    text = serializers.CharField()
    ordinal = serializers.IntegerField()
    document_key = serializers.CharField()
    document_title = serializers.CharField()
    revision = serializers.IntegerField()
    build_id = serializers.IntegerField()
    heading_path = serializers.CharField(
        help_text='The headings above the chunk, outermost first, joined by " › ".'
    )
    location = serializers.JSONField(
        allow_null=True,
        help_text="Where the chunk stands in its file, for a citation a person can check: "
        '{"unit": "page" | "slide" | "row", "first", "last"[, "part": the sheet]}, counted '
        "from 1 as the file's viewer counts; null for formats without pages.",
    )
    char_start = serializers.IntegerField(
        allow_null=True,
        help_text="The chunk's first character in the text its build extracted from the file "
        "(the admin's chunks page of the build shows it); null for chunks written before "
        "positions were kept.",
    )
    char_end = serializers.IntegerField(
        allow_null=True, help_text="One past the chunk's last character in that text."
    )
    rerank_score = serializers.FloatField(
        allow_null=True,
        help_text="The reranker's score when the search was reranked (the hits are in its "
        "order; `score` stays the fused score); null otherwise.",
    )
    document_id = serializers.IntegerField(
        help_text="The document's id (GET /api/v1/documents/{id})."
    )
    highlights = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        help_text="[start, end) offsets in `text` of the query's terms, matched as the keyword "
        "search matches them (stems, Chinese words; stop words are not marked).",
    )
    citation = serializers.SerializerMethodField(
        help_text="The span of the revision's extracted text this hit stands on, and the URL "
        "that returns it while the revision is retained (after newer revisions too); null for "
        "chunks written before positions were kept."
    )
    # DRF's metaclass takes declared fields off the class, so this does not shadow
    # Field.context (the serializer's context) at run time; mypy sees only the name.
    context = ContextOutput(  # type: ignore[assignment]
        required=False,
        help_text="With `neighbors` or `expand`: the passage around the hit.",
    )
    ranking = serializers.JSONField(
        required=False,
        help_text="With `explain`: `vector` and `keyword` ({rank, score}, the keyword's "
        "`share_of_bound` too; null where the leg did not list the chunk) and, for hybrid, "
        "`fused`: the chunk's own fused score and each feature's (or leg's) contribution, the "
        "largest first, and `kept` ({keyword_rank, at_rank, why}) when the learned fusion's "
        "keyword gate moved the hit up. Within one document the learned fusion orders "
        "passages by their words, so a hit's `score` is its place's and can differ from "
        "`fused.score`.",
    )

    @extend_schema_field(CitationOutput(allow_null=True))
    def get_citation(self, hit: Any) -> dict[str, Any] | None:
        return citation_of(hit)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        if instance.context is None:  # present only when asked for, as in `search_body`
            data.pop("context", None)
        else:
            data["context"] = instance.context.as_dict()
        return dict(data)


class SearchOutput(serializers.Serializer):
    kb = serializers.CharField(help_text="The knowledge base (the first, when several).")
    index_version = serializers.IntegerField(
        help_text="The index version that answered (the first knowledge base's, when several)."
    )
    knowledge_bases = serializers.DictField(
        child=serializers.IntegerField(),
        allow_null=True,
        help_text="A search of several knowledge bases: each one's answering index version "
        "(null for one).",
    )
    merged_by = serializers.ChoiceField(
        choices=["score", "rank"],
        allow_null=True,
        help_text="A search of several knowledge bases: how their lists were merged. score: the "
        "scores share a scale (vector search over one embedding model; keyword search, its "
        "terms weighed by the knowledge bases' statistics together; hybrid search with the "
        "learned fusion, a probability); rank: they do not (vector search over different "
        "models), by reciprocal rank (1 / (60 + rank in its knowledge base)).",
    )
    took_ms = serializers.FloatField()
    as_of = serializers.DateTimeField(allow_null=True)
    unretained_documents = serializers.IntegerField(
        allow_null=True,
        help_text="As-of searches: documents live then whose chunks are no longer retained.",
    )
    reranked = serializers.BooleanField(
        source="rerank.reranked",
        help_text="Whether the hits are in the reranker's order. False when no reranker is "
        "configured, `rerank` was false, the search was not hybrid, or the reranker failed "
        "(then the hits are in the fused order).",
    )
    rerank_reason = serializers.ChoiceField(
        choices=RERANK_REASONS,
        source="rerank.reason",
        allow_null=True,
        help_text="Why not reranked, null when reranked: not_requested (`rerank` was false), "
        "not_configured, not_hybrid, or, the reranker having failed: circuit_open, timeout, "
        "unavailable (unreachable, 5xx, 429), rejected (another 4xx), bad_answer.",
    )
    hits = HitOutput(many=True)
    ranking = serializers.JSONField(
        required=False,
        help_text="With `explain`: the mode, the fusion method, the query's language as the "
        "fusion reads it and the keyword leg's bound (the most the query's terms could score).",
    )

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        if data.get("ranking") is None:  # present only when explained, as in `search_body`
            data.pop("ranking", None)
        else:
            data["ranking"] = instance.ranking.as_dict()
        return dict(data)


_DATETIME = serializers.DateTimeField()


def search_body(result: SearchResult) -> dict[str, Any]:
    """SearchOutput's representation of `result`, built as plain dicts (SearchOutput stays the
    schema; a test holds the two equal)."""
    ranking = result.ranking
    return {
        "kb": str(result.kb),
        "index_version": int(result.index_version),
        "knowledge_bases": result.knowledge_bases,
        "merged_by": result.merged_by,
        "took_ms": float(result.took_ms),
        "as_of": _DATETIME.to_representation(result.as_of) if result.as_of is not None else None,
        "unretained_documents": result.unretained_documents,
        "reranked": bool(result.rerank.reranked),
        "rerank_reason": result.rerank.reason,
        "hits": [
            {
                "chunk_id": hit.chunk_id,
                "kb": hit.kb,
                "score": float(hit.score),
                "text": hit.text,
                "ordinal": hit.ordinal,
                "document_key": hit.document_key,
                "document_title": hit.document_title,
                "revision": hit.revision,
                "build_id": hit.build_id,
                "heading_path": hit.heading_path,
                "location": hit.location,
                "char_start": hit.char_start,
                "char_end": hit.char_end,
                "rerank_score": hit.rerank_score,
                "document_id": hit.document_id,
                "highlights": [list(span) for span in hit.highlights],
                "citation": citation_of(hit),
                **({"context": hit.context.as_dict()} if hit.context is not None else {}),
                **({"ranking": ranking.hits[hit.chunk_id]} if ranking else {}),
            }
            for hit in result.hits
        ],
        **({"ranking": ranking.as_dict()} if ranking else {}),
    }


# --- explain --------------------------------------------------------------------------------


class ExplainChunk(serializers.Serializer):
    id = serializers.IntegerField()
    ordinal = serializers.IntegerField()
    token_count = serializers.IntegerField()


class ExplainDocument(serializers.Serializer):
    id = serializers.IntegerField()
    key = serializers.CharField()
    title = serializers.CharField()
    desired_revision = serializers.IntegerField(allow_null=True)
    deleted = serializers.BooleanField()
    deleted_at = serializers.DateTimeField(allow_null=True)


class ExplainBuild(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.CharField()
    revision = serializers.IntegerField()
    is_desired_revision = serializers.BooleanField()
    expected_chunk_count = serializers.IntegerField(allow_null=True)
    chunk_count = serializers.IntegerField()
    complete = serializers.BooleanField()
    problems = serializers.ListField(child=serializers.CharField())
    error = serializers.CharField(allow_blank=True)


class ExplainIndexVersion(serializers.Serializer):
    number = serializers.IntegerField()
    state = serializers.CharField()
    active = serializers.BooleanField()


class ExplainPointer(serializers.Serializer):
    build_id = serializers.IntegerField(allow_null=True)
    revision = serializers.IntegerField(allow_null=True)
    published_at = serializers.DateTimeField(allow_null=True)
    points_at_this_build = serializers.BooleanField()


class ExplainApproval(serializers.Serializer):
    kb_requires_approval = serializers.BooleanField()
    awaiting_approval = serializers.BooleanField()
    approved_at = serializers.DateTimeField(allow_null=True)


class ExplainAccess(serializers.Serializer):
    document_groups = serializers.ListField(child=serializers.CharField())
    caller_groups = serializers.ListField(child=serializers.CharField())
    caller_reads_all_groups = serializers.BooleanField()
    groups_matched = serializers.ListField(child=serializers.CharField())
    allowed = serializers.BooleanField(
        help_text="Always true: a chunk the caller may not read is a 404, never explained."
    )


class ExplainOutput(serializers.Serializer):
    chunk_id = serializers.IntegerField()
    visible = serializers.BooleanField(help_text="Would search return this chunk now?")
    reasons = serializers.ListField(child=serializers.CharField())
    chunk = ExplainChunk()
    document = ExplainDocument()
    build = ExplainBuild()
    index_version = ExplainIndexVersion()
    pointer = ExplainPointer()
    approval = ExplainApproval()
    access = ExplainAccess()


# --- knowledge bases and documents ------------------------------------------------------------


class KnowledgeBaseOutput(serializers.Serializer):
    id = serializers.IntegerField()
    slug = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    require_approval = serializers.BooleanField()
    retention_days = serializers.IntegerField()
    ocr_mode = serializers.ChoiceField(
        choices=KnowledgeBase.OcrMode.choices,
        help_text="What OCR reads in this knowledge base's files: `off`, `pages_without_text` "
        "(images and PDF pages without a text layer) or `always` (also the pictures on PDF "
        "pages that have text). The server's CANON_OCR=off turns it off whatever this says.",
    )
    extract_headers_footers = serializers.BooleanField(
        help_text="Whether the page headers and footers of word-processing documents are indexed."
    )
    index_version = serializers.IntegerField(source="active_index_version.number")
    embedding_model = serializers.CharField(source="active_index_version.model")
    dimensions = serializers.IntegerField(source="active_index_version.dimensions")


class KnowledgeBaseListOutput(serializers.Serializer):
    results = KnowledgeBaseOutput(many=True)


def cursor_encode(after_id: int) -> str:
    return base64.urlsafe_b64encode(str(after_id).encode()).decode()


class DocumentPageInput(serializers.Serializer):
    cursor = serializers.CharField(
        required=False, max_length=64, help_text="next_cursor of the previous page."
    )
    limit = serializers.IntegerField(min_value=1, max_value=PAGE_LIMIT_MAX, default=50)

    def validate_cursor(self, value: str) -> int:
        try:
            after_id = int(base64.urlsafe_b64decode(value.encode()).decode())
        except (binascii.Error, UnicodeError, ValueError) as exc:
            raise serializers.ValidationError("Not a cursor this API returned.") from exc
        if not 0 <= after_id < 2**63:
            raise serializers.ValidationError("Not a cursor this API returned.")
        return after_id


class DocumentOutput(serializers.Serializer):
    id = serializers.IntegerField()
    kb = serializers.CharField(source="kb.slug")
    key = serializers.CharField()
    title = serializers.CharField()
    access_groups = serializers.ListField(child=serializers.CharField())
    metadata = serializers.DictField()
    desired_revision = serializers.IntegerField(allow_null=True)
    live_revision = serializers.IntegerField(
        allow_null=True, help_text="The revision search serves (null: nothing live)."
    )
    deleted = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_deleted(self, document: Any) -> bool:
        return document.deleted_at is not None


# One page of a list and the cursor of the next, from (rows, the next page's cursor value or
# None). A subclass names its rows' serializer `item` and declares, for the schema, `results =
# item(many=True)` and `next_cursor` (in that order). A comment, not a docstring: the schema
# would carry it as every page's description.
class CursorPageOutput(serializers.Serializer):
    item: type[serializers.Serializer]

    def to_representation(self, instance: Any) -> Any:
        rows, after = instance
        return {
            "results": self.item(rows, many=True).data,
            "next_cursor": cursor_encode(after) if after is not None else None,
        }


class DocumentPageOutput(serializers.Serializer):
    results = DocumentOutput(many=True, source="documents")
    next_cursor = serializers.SerializerMethodField()

    def get_next_cursor(self, page: DocumentPage) -> str | None:
        return cursor_encode(page.next_after_id) if page.next_after_id is not None else None


class BuildOutput(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.CharField()
    revision = serializers.IntegerField(source="revision.number")
    index_version = serializers.IntegerField(source="index_version.number")
    chunks_written = serializers.IntegerField()
    expected_chunk_count = serializers.IntegerField(allow_null=True)
    error = serializers.CharField(allow_blank=True)


class DocumentDetailOutput(DocumentOutput):
    status = serializers.CharField(help_text="One line: what is live, what is on its way.")
    live_build_id = serializers.IntegerField(allow_null=True)
    running_builds = BuildOutput(many=True, help_text="Pending, building or awaiting approval.")

    def to_representation(self, instance: Any) -> Any:
        detail: DocumentDetail = instance
        data = DocumentOutput(detail.document).data
        data.update(
            status=detail.status,
            live_revision=detail.live_revision,
            live_build_id=detail.live_build_id,
            running_builds=BuildOutput(detail.running_builds, many=True).data,
        )
        return data


class DocumentUploadInput(serializers.Serializer):
    key = serializers.CharField(max_length=255, help_text="Stable identity within the KB.")
    title = serializers.CharField(max_length=500, required=False, allow_blank=True)
    access_groups = serializers.ListField(
        child=serializers.CharField(max_length=1000, allow_blank=True),
        required=False,
        max_length=50,
        help_text="Repeat the field, or separate groups with commas.",
    )
    file = serializers.FileField(
        help_text=f"One file, of one of these kinds: {accepted_kinds()}. Its name ends in "
        f"one of {', '.join(accepted_extensions())}."
    )
    metadata = serializers.JSONField(
        required=False,
        help_text='A JSON object of metadata, e.g. {"department": "hr", "year": 2024}, as the '
        "text of this form field. Checked against the fields the knowledge base declares "
        "(GET /kbs/{kb}/metadata): a value that does not fit is a 400 naming the field. On a "
        "new revision it replaces the document's metadata; left out, the metadata is kept.",
    )

    def validate_metadata(self, value: Any) -> dict[str, Any]:
        if isinstance(value, str):  # a multipart field: its text is the JSON
            if len(value) > MAX_DOCUMENT_METADATA_CHARS:
                raise serializers.ValidationError(
                    f"The metadata is longer than {MAX_DOCUMENT_METADATA_CHARS} characters."
                )
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise serializers.ValidationError("Metadata must be a JSON object.") from exc
        if not isinstance(value, dict):
            raise serializers.ValidationError("Metadata must be a JSON object.")
        _no_nul(value)
        if len(json.dumps(value)) > MAX_DOCUMENT_METADATA_CHARS:
            raise serializers.ValidationError(
                f"The metadata is longer than {MAX_DOCUMENT_METADATA_CHARS} characters."
            )
        return cast(dict[str, Any], value)

    def validate_access_groups(self, value: list[str]) -> list[str]:
        groups = sorted({g.strip() for item in value for g in item.split(",") if g.strip()})
        if any(len(g) > 100 for g in groups):
            raise serializers.ValidationError("An access group is at most 100 characters.")
        return groups


class UploadOutput(serializers.Serializer):
    document_id = serializers.IntegerField()
    key = serializers.CharField()
    title = serializers.CharField()
    access_groups = serializers.ListField(child=serializers.CharField())
    revision = serializers.IntegerField()
    document_created = serializers.BooleanField()
    build_ids = serializers.ListField(child=serializers.IntegerField())
    metadata = serializers.DictField(required=False, help_text="The document's metadata, stored.")


# --- metadata summary ---------------------------------------------------------------------------


class MetadataValueOutput(serializers.Serializer):
    value = serializers.JSONField()
    documents = serializers.IntegerField(help_text="How many readable documents hold it.")


class MetadataFieldSummaryOutput(serializers.Serializer):
    name = serializers.CharField()
    type = serializers.ChoiceField(choices=["string", "number", "date", "boolean", "string_list"])
    description = serializers.CharField(allow_blank=True)
    built_in = serializers.BooleanField()
    documents = serializers.IntegerField(help_text="Readable documents that hold a value.")
    values = MetadataValueOutput(
        many=True,
        required=False,
        help_text="string, boolean and string_list fields: the 20 most frequent values.",
    )
    more_values = serializers.BooleanField(required=False)
    min = serializers.JSONField(required=False, help_text="number and date fields.")
    max = serializers.JSONField(required=False, help_text="number and date fields.")

    def to_representation(self, instance: Any) -> Any:
        data = {
            "name": instance.name,
            "type": instance.type,
            "description": instance.description,
            "built_in": instance.built_in,
            "documents": instance.documents,
        }
        if instance.type in ("number", "date"):
            data.update(min=instance.min, max=instance.max)
        else:
            data.update(
                values=[{"value": v, "documents": n} for v, n in instance.values],
                more_values=instance.more_values,
            )
        return data


class MetadataKeyOutput(serializers.Serializer):
    key = serializers.CharField()
    documents = serializers.IntegerField()


class MetadataSummaryOutput(serializers.Serializer):
    kb = serializers.CharField()
    documents = serializers.IntegerField(help_text="Readable, non-deleted documents.")
    # the metaclass takes declared fields out of the class body, so `fields` stays DRF's
    fields = MetadataFieldSummaryOutput(many=True)  # type: ignore[assignment]
    undeclared = MetadataKeyOutput(
        many=True, help_text="Keys documents hold that the knowledge base does not declare."
    )

    def to_representation(self, instance: Any) -> Any:
        kb, summary = instance
        return {
            "kb": kb.slug,
            "documents": summary.documents,
            "fields": MetadataFieldSummaryOutput(summary.fields, many=True).data,
            "undeclared": [{"key": k, "documents": n} for k, n in summary.undeclared],
        }
