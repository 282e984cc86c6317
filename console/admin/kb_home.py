"""A knowledge base's home: its documents by state, the chunks it serves, its work queues
(awaiting approval, failed, deletions held by sync runs), its failures, the active index
version's settings, one progress bar per index version still building, and its
timeline (`kb.timeline`). The admin's index shows the same summary on top for a user whose
tenant has exactly one knowledge base (`console.templatetags.kb_home`).

Every view finds its knowledge base through `TenantScopedAdmin.get_scoped_object_or_404` and
needs the permission to view knowledge bases. Counts cover the whole knowledge base; names
(failures, timeline entries) only documents the user may read.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext

from console.admin.document_filters import KB_PARAMETER, DocumentStatusFilter
from console.admin.scoping import TenantScopedAdmin, readable_filter, request_reader
from console.admin.sources import kb_sources
from console.admin.work_queues import held_tile
from kb import document_states, home, timeline
from kb.access import Reader
from kb.models import IndexVersion, KnowledgeBase
from kb.selectors.index_versions import SETTING_LABELS, index_version_settings
from kb.selectors.metadata import metadata_summary

HOME_TIMELINE = 10  # entries on the home page; the timeline page has the rest


def kb_reader(request: HttpRequest, kb: KnowledgeBase) -> Reader:
    """Who reads `kb`'s pages: the user's tenant and groups; a superuser reads every group (of
    any tenant). The knowledge base was found through the scoped lookup."""
    reader = request_reader(request)
    if request.user.is_superuser or reader is None:
        return Reader(tenant_id=kb.tenant_id, access_groups=frozenset(), all_groups=True)
    return reader


def _kb(model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str) -> KnowledgeBase:
    kb: KnowledgeBase = model_admin.get_scoped_object_or_404(request, object_id)
    if not model_admin.has_view_permission(request, kb):
        raise PermissionDenied(gettext("You need the permission to view knowledge bases."))
    return kb


def home_summary(request: HttpRequest, kb: KnowledgeBase, *, timeline_size: int) -> dict[str, Any]:
    """What the home page and the index's panel show of `kb`."""
    failures, failed_total = home.knowledge_base_failures(kb=kb, named=readable_filter(request))
    version = kb.active_index_version
    page = timeline.kb_timeline(kb=kb, reader=kb_reader(request, kb), limit=timeline_size)
    return {
        "kb": kb,
        "counts": home.knowledge_base_counts(kb=kb),
        "failures": failures,
        "failed_hidden": failed_total - len(failures),
        "progress": home.knowledge_base_build_progress(kb=kb),
        "active_version": version,
        "version_settings": _settings_for(request, version),
        "timeline": page,
        "show_versions": kb.index_versions.count() > 1,
        "links": _links(request, kb),
        # deletions sync runs hold for a person: a work queue like awaiting approval
        "held": held_tile(request, kb),
    }


# Settings only an index admin acts on: shown to content managers they are noise ("pipeline
# p2", "vector storage vector").
INDEX_ADMIN_SETTINGS = ("pipeline", "vector storage")


def _settings_for(request: HttpRequest, version: IndexVersion | None) -> list[tuple[str, str]]:
    if version is None:
        return []
    rows = index_version_settings(version)
    if request.user.has_perm("kb.manage_index_versions"):
        return rows
    hidden = {str(SETTING_LABELS[key]) for key in INDEX_ADMIN_SETTINGS}
    return [(label, value) for label, value in rows if label not in hidden]


def _links(request: HttpRequest, kb: KnowledgeBase) -> dict[str, str]:
    documents = f"{reverse('admin:kb_document_changelist')}?{KB_PARAMETER}={kb.pk}"
    return {
        "home": reverse("admin:kb_knowledgebase_home", args=[kb.pk]),
        "settings": reverse("admin:kb_knowledgebase_change", args=[kb.pk]),
        "timeline": reverse("admin:kb_knowledgebase_timeline", args=[kb.pk]),
        "search": reverse("admin:kb_knowledgebase_search", args=[kb.pk]),
        "progress": reverse("admin:kb_knowledgebase_progress", args=[kb.pk]),
        "documents": documents,
        # the document list's status filter: the same states, counted the same way
        **{
            name: f"{documents}&{DocumentStatusFilter.parameter_name}={state}"
            for name, state in (
                ("served", document_states.SERVED),
                ("awaiting", document_states.AWAITING_APPROVAL),
                ("building", document_states.BUILDING),
                ("failed", document_states.FAILED),
                ("deleted", document_states.DELETED),
            )
        },
        "chunks": reverse("admin:kb_chunk_changelist") + f"?kb__id__exact={kb.pk}",
        # its own questions' figures over time (evaluation), for who may see the runs
        **(
            {"quality": reverse("admin:evaluation_quality", args=[kb.pk])}
            if request.user.has_perm("evaluation.view_evaluationrun")
            else {}
        ),
    }


def home_view(model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    kb = _kb(model_admin, request, object_id)
    context = {
        **model_admin.admin_site.each_context(request),
        **home_summary(request, kb, timeline_size=HOME_TIMELINE),
        "title": f"{kb.name}",
        "subtitle": str(kb),
        "opts": model_admin.model._meta,
        "can_search": request.user.has_perm("kb.view_document"),
        "can_change": model_admin.has_change_permission(request, kb),
        # values and counts of the documents this user may read only (`kb.selectors.metadata`)
        "metadata": metadata_summary(kb=kb, reader=kb_reader(request, kb)),
        "can_declare_fields": request.user.has_perm("kb.add_metadatafield"),
        # the folders, buckets, sites and repositories it is kept in step with (sources/)
        "sources": kb_sources(request, kb),
    }
    return TemplateResponse(request, "admin/kb/knowledgebase/home.html", context)


def progress_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> JsonResponse:
    """The home page's progress bars and counts, polled by its script."""
    kb = _kb(model_admin, request, object_id)
    counts = home.knowledge_base_counts(kb=kb)
    return JsonResponse(
        {
            "versions": [v.as_json() for v in home.knowledge_base_build_progress(kb=kb)],
            "counts": counts.__dict__,
        }
    )


def timeline_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    kb = _kb(model_admin, request, object_id)
    before = request.GET.get("before")
    page = timeline.kb_timeline(kb=kb, reader=kb_reader(request, kb), before=before)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Timeline of %(name)s") % {"name": kb.name},
        "kb": kb,
        "timeline": page,
        "newest": bool(timeline.parse_cursor(before)),
        "show_versions": kb.index_versions.count() > 1,
        "links": _links(request, kb),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/kb/knowledgebase/timeline.html", context)


def landing_knowledge_bases(request: HttpRequest) -> list[KnowledgeBase]:
    """The knowledge bases of the user's tenant they may view, for the admin's index."""
    reader = request_reader(request)
    model_admin = admin.site._registry.get(KnowledgeBase)
    if reader is None or model_admin is None or not model_admin.has_view_permission(request):
        return []
    return list(
        KnowledgeBase.objects.filter(tenant_id=reader.tenant_id)
        .select_related("active_index_version", "tenant")
        .order_by("slug")[:50]
    )
