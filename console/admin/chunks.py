"""Chunks, read-only: a list (searchable by text, filtered by knowledge base, build or document)
and a page per build with the text its parser extracted and its chunks drawn on it, with
ordinal, heading path, tokens, characters and boundaries (`ingestion.build_text`).

Viewing chunks takes the permission to view builds (they are a build's contents); rows are
scoped like the documents they belong to (tenant and access groups), and the build page finds
its build through the build admin's scoped lookup. Chunk rows are read without their vectors.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext, gettext_lazy

from console.admin.scoping import ReadOnlyAdmin, TenantScopedAdmin
from console.formats import location_words
from ingestion import build_text
from kb.models import Build, Chunk
from kb.selectors.builds import build_progress_of
from kb.selectors.index_versions import index_version_progress, index_version_status
from textkit import extract as extractors

CHUNKS_PER_PAGE = 100


class _OneRowFilter(admin.SimpleListFilter):
    """A filter set from a link (`?build=12`): it offers only the row it is set to, so it names
    nothing the user did not come from; rows stay scoped by the admin's queryset."""

    field = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, f"#{value}")] if value and value.isdigit() else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        if not value.isdigit() or len(value) > 18:
            return queryset.none()
        return queryset.filter(**{self.field: int(value)})


class BuildFilter(_OneRowFilter):
    title = gettext_lazy("build")
    parameter_name = "build"
    field = "build_id"


class DocumentFilter(_OneRowFilter):
    title = gettext_lazy("document")
    parameter_name = "document"
    field = "document_id"


@admin.register(Chunk)
class ChunkAdmin(ReadOnlyAdmin):
    tenant_path = "kb__tenant_id"
    document_path = "document"
    list_display = [
        "number",
        "document",
        "build_link",
        "heading_path",
        "token_count",
        "characters",
        "preview",
    ]
    list_display_links = ["number"]
    list_filter = ["kb", BuildFilter, DocumentFilter]
    search_fields = ["text"]
    list_select_related = ["document", "build__revision", "index_version"]
    show_full_result_count = False
    ordering = ["build_id", "ordinal"]
    fields = (
        "kb",
        "document",
        "build",
        "index_version",
        "number",
        "heading_path",
        "where",
        "characters_of_extracted_text",
        "token_count",
        "characters",
        "content_hash",
        "chunk_key",
        "text",
        "created_at",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).defer("embedding", "lexical")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("kb.view_build") or super().has_view_permission(request, obj)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    @admin.display(description=gettext_lazy("build"))
    def build_link(self, chunk: Chunk) -> str:
        return format_html(
            gettext('<a href="{}#chunk-{}">r{} v{} (build {})</a>'),
            reverse("admin:kb_build_chunks", args=[chunk.build_id]),
            chunk.ordinal,
            chunk.build.revision.number,
            chunk.index_version.number,
            chunk.build_id,
        )

    @admin.display(description=gettext_lazy("chunk"), ordering="ordinal")
    def number(self, chunk: Chunk) -> int:
        """Chunks are counted from 1 on every page (diffs, test search, a build's chunks); the
        stored ordinal and the API count from 0."""
        return chunk.ordinal + 1

    @admin.display(description=gettext_lazy("characters"))
    def characters(self, chunk: Chunk) -> int:
        return len(chunk.text)

    @admin.display(description=gettext_lazy("where in the file"))
    def where(self, chunk: Chunk) -> str:
        """The pages, slides or rows the chunk stands on, as the file's viewer counts them."""
        if not chunk.location:
            return "—"
        return location_words(extractors.Location.from_json(chunk.location))

    @admin.display(description=gettext_lazy("range of the extracted text"))
    def characters_of_extracted_text(self, chunk: Chunk) -> str:
        if chunk.char_start is None or chunk.char_end is None:
            return "—"
        return gettext("characters %(first)s–%(last)s") % {  # noqa: RUF001 (an en dash: a range)
            "first": f"{chunk.char_start:,}",
            "last": f"{chunk.char_end:,}",
        }

    @admin.display(description=gettext_lazy("text"))
    def preview(self, chunk: Chunk) -> str:
        return Truncator(chunk.text).chars(160)

    def get_urls(self) -> list[Any]:
        return [
            path(
                "of-build/<int:build_id>/",
                self.bound_view(build_chunks_view),
                name="kb_build_chunks",
            ),
            *super().get_urls(),
        ]


def build_chunks_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, build_id: int
) -> HttpResponse:
    """One build: the parsed text with its chunk boundaries, and its chunks, a page at a time."""
    builds = model_admin.admin_site._registry[Build]
    assert isinstance(builds, TenantScopedAdmin)
    build: Build = builds.get_scoped_object_or_404(request, str(build_id))
    if not model_admin.has_view_permission(request):
        raise PermissionDenied(gettext("You need the permission to view builds."))
    build = Build.objects.select_related("document", "revision", "index_version", "kb").get(
        pk=build.pk
    )
    chunks = list(build_text.build_chunks(build=build))
    parsed = build_text.build_parsed_text(build=build)
    spans = build_text.chunk_spans(chunks, parsed.text if parsed else None)
    page = Paginator(spans, CHUNKS_PER_PAGE).get_page(request.GET.get("page"))
    located = [s for s in page.object_list if s.start is not None]
    pieces: list[build_text.TextPiece] = []
    window = (0, 0)
    if parsed is not None:
        # The text of this page's chunks; the first page from the top, the last to the end.
        start = 0 if page.number == 1 or not located else located[0].start or 0
        last = located[-1].end if located else None
        end = len(parsed.text) if not page.has_next() or last is None else last
        window = (start, end)
        pieces = build_text.marked_text(parsed.text, spans, start=window[0], end=window[1])
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Chunks of %(document)s, r%(r)s, v%(v)s")
        % {"document": build.document, "r": build.revision.number, "v": build.index_version.number},
        "build": build,
        "progress": build_progress_of(build=build),
        # what the version is doing, as its row on the knowledge base's page says (counts only)
        "version_status": index_version_status(
            version=build.index_version,
            progress=index_version_progress(version=build.index_version),
            kb=build.kb,
        ),
        "parsed": parsed,
        "pieces": pieces,
        "window": window,
        "page": page,
        "chunk_count": len(chunks),
        "document_url": reverse("admin:kb_document_change", args=[build.document_id]),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/kb/chunk/build_chunks.html", context)
