"""Test search on a knowledge base's page: the search the API runs (`retrieval.search.engine.search`
/ `search_as_of`), as the user or as a key with chosen access groups, with why each hit is
visible, and optionally the same query against a candidate index version side by side with the
active one, before its swap.

Never wider than the user: the groups offered are those they hold (every group of the
knowledge base for superusers), a key with groups is a principal with exactly those, and the
tenant and knowledge base are the page's, found through the scoped lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from console.admin.kb_home import kb_reader
from console.admin.scoping import TenantScopedAdmin
from kb.models import IndexVersion, KnowledgeBase
from kb.selectors.index_versions import index_version_comparison, live_index_versions
from retrieval.principals import Principal
from retrieval.search.engine import MODES, search
from retrieval.search.explain import hits_visibility
from retrieval.search.history import HistoryOutOfRange, index_version_at, search_as_of
from retrieval.search.hits import SearchResult
from textkit.analysis import marked_spans

MAX_TOP_K = 50


def _kb_groups(kb: KnowledgeBase) -> list[str]:
    """Every access group a document of `kb` is behind (what a superuser may search as)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT g FROM kb_document, unnest(access_groups) AS g "
            "WHERE kb_id = %s ORDER BY g",
            [kb.pk],
        )
        return [row[0] for row in cursor.fetchall()]


class TestSearchForm(forms.Form):
    query = forms.CharField(max_length=1000)
    mode = forms.ChoiceField(choices=[(m, m) for m in MODES], initial="hybrid", required=False)
    top_k = forms.IntegerField(
        min_value=1,
        max_value=MAX_TOP_K,
        required=False,
        widget=forms.NumberInput(attrs={"placeholder": "10"}),
        help_text=f"How many hits (1-{MAX_TOP_K}); empty: 10.",
    )
    as_key = forms.BooleanField(
        required=False,
        label="As a key with groups",
        help_text="Search as an API key holding only the groups ticked below (none ticked: a "
        "key that reads only documents without groups). Unticked: as you.",
    )
    groups = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Groups"
    )
    as_of = forms.DateTimeField(
        required=False,
        label="As of",
        help_text="What search returned at this time (within the retention window), e.g. "
        "2025-05-01 14:30:00. Empty: now.",
        widget=forms.DateTimeInput(attrs={"placeholder": "YYYY-MM-DD HH:MM:SS"}),
    )
    compare = forms.TypedChoiceField(
        required=False,
        coerce=int,
        empty_value=None,
        label="Compare with",
        help_text="Run the same query against another index version beside the active one: a "
        "candidate, or a retired one kept for rollback.",
    )

    def __init__(
        self, *args: Any, groups: list[str], candidates: list[IndexVersion], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        groups_field = self.fields["groups"]
        assert isinstance(groups_field, forms.MultipleChoiceField)
        groups_field.choices = [(g, g) for g in groups]
        if not groups:
            groups_field.help_text = "You hold no access groups."
        compare = self.fields["compare"]
        assert isinstance(compare, forms.TypedChoiceField)
        compare.choices = [("", "— nothing —")] + [
            (v.pk, f"v{v.number} ({_compare_state(v)}: {v.provider}/{v.model}, {v.dimensions}d)")
            for v in candidates
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("as_of") and data.get("compare"):
            raise forms.ValidationError("Compare searches now: leave 'as of' empty to compare.")
        return data


def _compare_state(version: IndexVersion) -> str:
    if version.state == IndexVersion.State.RETIRED:
        return "retired, kept for rollback"
    return str(version.state)


@dataclass(frozen=True)
class Side:
    """One column of results: which version answered, its hits with why each is visible."""

    title: str
    version: IndexVersion | None
    result: SearchResult | None
    rows: list[dict[str, Any]]
    error: str = ""


def _principal(
    request: HttpRequest, kb: KnowledgeBase, *, as_key: bool, groups: list[str]
) -> Principal:
    """The user (their tenant and groups; a superuser reads every group), or a key holding
    exactly `groups` (which the form limited to groups the user holds)."""
    reader = kb_reader(request, kb)
    allowed = set(_kb_groups(kb)) if reader.all_groups else set(reader.access_groups)
    if not set(groups) <= allowed:  # the form's choices already refuse them; never wider
        raise PermissionDenied("You may search only as groups you hold.")
    if as_key:
        return Principal(
            tenant_id=kb.tenant_id,
            kb_ids=frozenset({kb.pk}),
            access_groups=frozenset(groups),
            all_groups=False,
            can_read_history=True,
            user_id=request.user.pk,
        )
    return Principal(
        tenant_id=kb.tenant_id,
        kb_ids=None,
        access_groups=reader.access_groups,
        all_groups=reader.all_groups,
        can_read_history=True,
        user_id=request.user.pk,
    )


def highlighted(text: str, query: str) -> SafeString:
    """`text`, escaped, with the words the keyword index matches for `query` marked: the same
    analysis (`textkit.analysis.marked_spans`: stems, stop words, CJK words), so a mark means
    the keyword leg counted that word."""
    parts: list[str] = []
    at = 0
    for start, end in marked_spans(text, query):
        parts.append(f"{escape(text[at:start])}<mark>{escape(text[start:end])}</mark>")
        at = end
    parts.append(str(escape(text[at:])))
    return mark_safe("".join(parts))  # noqa: S308 (escaped above; only <mark> added)


def rank_words(ranking: dict[str, Any] | None) -> str:
    """One line on why a hit ranks where it does: its place in each leg and, for hybrid, the
    fusion's score and the three features (or legs) that moved it most."""
    if not ranking:
        return ""
    parts = []
    for leg in ("vector", "keyword"):
        if leg not in ranking:
            continue
        place = ranking[leg]
        if place is None:
            parts.append(f"{leg}: not listed")
            continue
        words = f"{leg} #{place['rank']} ({place['score']:.3g}"
        if "share_of_bound" in place:
            words += f", {place['share_of_bound']:.0%} of the most the query could score"
        parts.append(words + ")")
    fused = ranking.get("fused")
    if fused:
        moved = ", ".join(
            f"{c['feature']} {c['contribution']:+.2f}" for c in fused["contributions"][:3]
        )
        parts.append(f"fused {fused['score']:.3f} ({moved})")
    return " · ".join(parts)


def _rows(
    *,
    principal: Principal,
    kb: KnowledgeBase,
    version: IndexVersion,
    result: SearchResult,
    query: str,
) -> list[dict[str, Any]]:
    why = hits_visibility(
        principal=principal, kb=kb, version=version, hits=result.hits, as_of=result.as_of
    )
    documents = dict(
        kb.documents.filter(key__in={h.document_key for h in result.hits}).values_list("key", "pk")
    )
    return [
        {
            "rank": rank,
            "hit": hit,
            "text": highlighted(hit.text, query),
            "why": why.get(hit.chunk_id),
            "ranked": rank_words(result.ranking.hits.get(hit.chunk_id) if result.ranking else None),
            "document_url": (
                reverse("admin:kb_document_change", args=[documents[hit.document_key]])
                if hit.document_key in documents
                else ""
            ),
            "chunks_url": reverse("admin:kb_build_chunks", args=[hit.build_id])
            + f"#chunk-{hit.ordinal}",
        }
        for rank, hit in enumerate(result.hits, start=1)
    ]


def _side(
    *,
    title: str,
    principal: Principal,
    kb: KnowledgeBase,
    data: dict[str, Any],
    version: IndexVersion | None = None,
) -> Side:
    query, mode, top_k = data["query"], data.get("mode") or "hybrid", data.get("top_k") or 10
    try:
        if data.get("as_of"):
            result = search_as_of(
                principal=principal,
                kb=kb,
                query=query,
                as_of=data["as_of"],
                top_k=top_k,
                mode=mode,
                explain=True,
            )
            answered: IndexVersion | None = index_version_at(kb=kb, at=data["as_of"])
        else:
            result = search(
                principal=principal,
                kb=kb,
                query=query,
                top_k=top_k,
                mode=mode,
                index_version=version,
                explain=True,
            )
            answered = version or kb.active_index_version
    except HistoryOutOfRange as exc:
        return Side(title, version, None, [], error=str(exc))
    assert answered is not None
    rows = _rows(principal=principal, kb=kb, version=answered, result=result, query=query)
    return Side(title, answered, result, rows)


def test_search_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    kb: KnowledgeBase = model_admin.get_scoped_object_or_404(request, object_id)
    allowed = model_admin.has_view_permission(request, kb)
    if not (allowed and request.user.has_perm("kb.view_document")):
        raise PermissionDenied("You need the permissions to view knowledge bases and documents.")
    reader = kb_reader(request, kb)
    groups = _kb_groups(kb) if reader.all_groups else sorted(reader.access_groups)
    # candidates, and retired versions still kept for rollback (a swap back, or a version
    # rollback, may be tried first): every version still built for, but the active one
    candidates = sorted(
        (v for v in live_index_versions(kb_id=kb.pk) if v.pk != kb.active_index_version_id),
        key=lambda v: -v.number,
    )
    form = TestSearchForm(
        request.GET if "query" in request.GET else None, groups=groups, candidates=candidates
    )
    sides: list[Side] = []
    comparison = None
    if form.is_bound and form.is_valid() and kb.active_index_version_id is not None:
        data = form.cleaned_data
        principal = _principal(
            request, kb, as_key=data.get("as_key", False), groups=data.get("groups") or []
        )
        when = "as of " + data["as_of"].isoformat(sep=" ") if data.get("as_of") else "now"
        sides.append(_side(title=f"Active version, {when}", principal=principal, kb=kb, data=data))
        candidate = next((v for v in candidates if v.pk == data.get("compare")), None)
        if candidate is not None:
            sides.append(
                _side(
                    title=(
                        "Retired, kept for rollback"
                        if candidate.state == IndexVersion.State.RETIRED
                        else "Candidate"
                    ),
                    principal=principal,
                    kb=kb,
                    data=data,
                    version=candidate,
                )
            )
            comparison = index_version_comparison(
                active=kb.active_index_version, candidate=candidate
            )
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Test search: {kb.name}",
        "kb": kb,
        "form": form,
        "sides": sides,
        "comparison": comparison,
        "compare_title": (
            "retired, kept for rollback"
            if comparison and comparison.candidate.version.state == IndexVersion.State.RETIRED
            else "candidate"
        ),
        "shared": _shared(sides),
        "home_url": reverse("admin:kb_knowledgebase_home", args=[kb.pk]),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/kb/knowledgebase/test_search.html", context)


def _shared(sides: list[Side]) -> int | None:
    """How many documents both columns return (None without a comparison)."""
    if len(sides) != 2 or sides[0].result is None or sides[1].result is None:
        return None
    left = {h.document_key for h in sides[0].result.hits}
    return len(left & {h.document_key for h in sides[1].result.hits})
