"""Test search on a knowledge base's page: the search the API runs (`retrieval.search.engine.search`
/ `search_as_of`), as the user or as a key with chosen access groups, under a metadata filter in
the API's language (`test_search_filter`), with why each hit is visible and, in words, what its
score is, what found it and where in its file it stands (`search_explained`), and optionally the
same query against a candidate index version side by side with the active one, before its swap
(the candidate called what its row on the settings page calls it: `index_version_status`).

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
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import format_lazy
from django.utils.translation import gettext, gettext_lazy, pgettext_lazy

from console.admin.evaluation_pages import search_answer_context
from console.admin.kb_home import kb_reader
from console.admin.scoping import TenantScopedAdmin
from console.admin.search_explained import (
    ScoreWords,
    found_by,
    rank_words,
    score_words,
    where_words,
)
from console.admin.test_search_filter import AppliedFilter, add_filter_inputs, checked_filter
from kb.metadata import FieldSpec, field_specs
from kb.models import IndexVersion, KnowledgeBase
from kb.selectors.index_versions import (
    VersionStatus,
    index_version_comparison,
    index_version_progress,
    index_version_status,
    live_index_versions,
)
from retrieval.principals import Principal
from retrieval.search.engine import MODES, search
from retrieval.search.explain import hits_visibility
from retrieval.search.history import HistoryOutOfRange, index_version_at, search_as_of
from retrieval.search.hits import SearchFilters, SearchResult
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


# The search modes as the form offers them (the API's names stay the values).
MODE_WORDS = {
    "hybrid": pgettext_lazy("search mode", "hybrid"),
    "vector": pgettext_lazy("search mode", "vector"),
    "keyword": pgettext_lazy("search mode", "keyword"),
}


class TestSearchForm(forms.Form):
    query = forms.CharField(max_length=1000, label=gettext_lazy("Query"))
    mode = forms.ChoiceField(
        choices=[(m, MODE_WORDS.get(m, m)) for m in MODES],
        initial="hybrid",
        required=False,
        label=gettext_lazy("Mode"),
    )
    top_k = forms.IntegerField(
        min_value=1,
        max_value=MAX_TOP_K,
        required=False,
        label=gettext_lazy("Top k"),
        widget=forms.NumberInput(attrs={"placeholder": "10"}),
        help_text=format_lazy(gettext_lazy("How many hits (1-{max}); empty: 10."), max=MAX_TOP_K),
    )
    as_key = forms.BooleanField(
        required=False,
        label=gettext_lazy("As a key with groups"),
        help_text=gettext_lazy(
            "Search as an API key holding only the groups ticked below (none ticked: a "
            "key that reads only documents without groups). Unticked: as you."
        ),
    )
    groups = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label=gettext_lazy("Groups")
    )
    as_of = forms.DateTimeField(
        required=False,
        label=gettext_lazy("As of"),
        help_text=gettext_lazy(
            "What search returned at this time (within the retention window), e.g. "
            "2025-05-01 14:30:00. Empty: now."
        ),
        widget=forms.DateTimeInput(attrs={"placeholder": "YYYY-MM-DD HH:MM:SS"}),
    )
    compare = forms.TypedChoiceField(
        required=False,
        coerce=int,
        empty_value=None,
        label=gettext_lazy("Compare with"),
        help_text=gettext_lazy(
            "Run the same query against another index version beside the active one: a "
            "candidate, or a retired one kept for rollback."
        ),
    )

    def __init__(
        self,
        *args: Any,
        groups: list[str],
        candidates: list[Candidate],
        fields: dict[str, FieldSpec],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.specs = fields
        self.applied: AppliedFilter | None = None
        add_filter_inputs(self, fields)
        self.order_fields(
            ["query", "mode", "top_k", "where_field", "where_op", "where_value", "filter"]
        )
        groups_field = self.fields["groups"]
        assert isinstance(groups_field, forms.MultipleChoiceField)
        groups_field.choices = [(g, g) for g in groups]
        if not groups:
            groups_field.help_text = gettext("You hold no access groups.")
        compare = self.fields["compare"]
        assert isinstance(compare, forms.TypedChoiceField)
        compare.choices = [("", gettext("— nothing —"))] + [
            (
                c.version.pk,
                f"v{c.version.number} ({c.state_label}: {c.version.provider}/"
                f"{c.version.model}, {c.version.dimensions}d)",
            )
            for c in candidates
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("as_of") and data.get("compare"):
            raise forms.ValidationError(
                gettext("Compare searches now: leave 'as of' empty to compare.")
            )
        self.applied = checked_filter(self, self.specs)
        return data


@dataclass(frozen=True)
class Candidate:
    """A version test search may compare with, and what it is doing
    (`kb.selectors.index_versions.index_version_status`: the word its row on the knowledge
    base's page uses, so a candidate ready to swap in is called ready here too)."""

    version: IndexVersion
    status: VersionStatus

    @property
    def state_label(self) -> str:
        """ "ready: 2/2 built", "building: 1/2 built"; a retired version in few words."""
        if self.status.kind == "retired":
            return str(STATE_WORDS["retired"])
        return self.status.label

    @property
    def title(self) -> str:
        if self.status.kind == "retired":
            return gettext("Retired, kept for rollback")
        return gettext("Candidate (%(state)s)") % {
            "state": STATE_WORDS.get(self.status.kind, self.status.kind)
        }

    @property
    def column_title(self) -> str:
        """The title as the comparison table's column heading says it, within a sentence."""
        if self.status.kind == "retired":
            return gettext("retired, kept for rollback")
        return gettext("candidate (%(state)s)") % {
            "state": STATE_WORDS.get(self.status.kind, self.status.kind)
        }


# A version's state kind (`VersionStatus.kind`) in the few words of a column's title.
STATE_WORDS = {
    "ready": gettext_lazy("ready"),
    "building": gettext_lazy("building"),
    "indexing": gettext_lazy("building its vector index"),
    "incomplete": gettext_lazy("incomplete"),
    "retired": gettext_lazy("retired, kept for rollback"),
}


def _candidates(kb: KnowledgeBase) -> list[Candidate]:
    """Candidates, and retired versions still kept for rollback (a swap back, or a version
    rollback, may be tried first): every version still built for, but the active one, newest
    first. Counts only: the statuses name no document."""
    versions = sorted(
        (v for v in live_index_versions(kb_id=kb.pk) if v.pk != kb.active_index_version_id),
        key=lambda v: -v.number,
    )
    return [
        Candidate(
            v,
            index_version_status(version=v, progress=index_version_progress(version=v), kb=kb),
        )
        for v in versions
    ]


@dataclass(frozen=True)
class Side:
    """One column of results: which version answered, its hits with why each is visible."""

    title: str
    version: IndexVersion | None
    result: SearchResult | None
    rows: list[dict[str, Any]]
    error: str = ""
    scores: ScoreWords | None = None  # what this column's numbers mean


def _principal(
    request: HttpRequest, kb: KnowledgeBase, *, as_key: bool, groups: list[str]
) -> Principal:
    """The user (their tenant and groups; a superuser reads every group), or a key holding
    exactly `groups` (which the form limited to groups the user holds)."""
    reader = kb_reader(request, kb)
    allowed = set(_kb_groups(kb)) if reader.all_groups else set(reader.access_groups)
    if not set(groups) <= allowed:  # the form's choices already refuse them; never wider
        raise PermissionDenied(gettext("You may search only as groups you hold."))
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


def _rows(
    *,
    principal: Principal,
    kb: KnowledgeBase,
    version: IndexVersion,
    result: SearchResult,
    query: str,
    mode: str,
    state: str | None,
) -> list[dict[str, Any]]:
    why = hits_visibility(
        principal=principal,
        kb=kb,
        version=version,
        hits=result.hits,
        as_of=result.as_of,
        state=state,
    )
    ranking = result.ranking.hits if result.ranking else {}
    documents = dict(
        kb.documents.filter(key__in={h.document_key for h in result.hits}).values_list("key", "pk")
    )
    return [
        {
            "rank": rank,
            "hit": hit,
            "text": highlighted(hit.text, query),
            "why": why.get(hit.chunk_id),
            "ranked": rank_words(ranking.get(hit.chunk_id)),
            "found_by": found_by(hit, ranking.get(hit.chunk_id), query, mode),
            "where": where_words(hit.location),
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
    where: AppliedFilter | None,
    candidate: Candidate | None = None,
) -> Side:
    query, mode, top_k = data["query"], data.get("mode") or "hybrid", data.get("top_k") or 10
    version = candidate.version if candidate else None
    filters = SearchFilters(where=where.tree) if where else None
    try:
        if data.get("as_of"):
            result = search_as_of(
                principal=principal,
                kb=kb,
                query=query,
                as_of=data["as_of"],
                top_k=top_k,
                mode=mode,
                filters=filters,
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
                filters=filters,
                index_version=version,
                explain=True,
            )
            answered = version or kb.active_index_version
    except HistoryOutOfRange as exc:
        return Side(title, version, None, [], error=history_words(exc))
    assert answered is not None
    rows = _rows(
        principal=principal,
        kb=kb,
        version=answered,
        result=result,
        query=query,
        mode=mode,
        state=str(STATE_WORDS[candidate.status.kind])
        if candidate and candidate.status.kind in STATE_WORDS
        else None,
    )
    return Side(title, answered, result, rows, scores=score_words(result.ranking, mode))


def history_words(exc: HistoryOutOfRange) -> str:
    """Why an as-of search could not run, in the form's words (the API's name the field)."""
    if exc.earliest is None:
        return gettext("That time is in the future: choose a time before now in “As of”.")
    return gettext(
        "That time is before the oldest history this knowledge base keeps (%(days)s days): the "
        "earliest time “As of” can show is %(earliest)s."
    ) % {
        "days": exc.retention_days,
        "earliest": f"{timezone.localtime(exc.earliest):%Y-%m-%d %H:%M:%S}",
    }


def test_search_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    kb: KnowledgeBase = model_admin.get_scoped_object_or_404(request, object_id)
    allowed = model_admin.has_view_permission(request, kb)
    if not (allowed and request.user.has_perm("kb.view_document")):
        raise PermissionDenied(
            gettext("You need the permissions to view knowledge bases and documents.")
        )
    reader = kb_reader(request, kb)
    groups = _kb_groups(kb) if reader.all_groups else sorted(reader.access_groups)
    candidates = _candidates(kb)
    form = TestSearchForm(
        request.GET if "query" in request.GET else None,
        groups=groups,
        candidates=candidates,
        fields=field_specs(kb),
    )
    sides: list[Side] = []
    comparison = None
    compare_title = ""
    if form.is_bound and form.is_valid() and kb.active_index_version_id is not None:
        data = form.cleaned_data
        principal = _principal(
            request, kb, as_key=data.get("as_key", False), groups=data.get("groups") or []
        )
        title = (
            gettext("Active version, as of %(when)s") % {"when": data["as_of"].isoformat(sep=" ")}
            if data.get("as_of")
            else gettext("Active version, now")
        )
        sides.append(
            _side(
                title=title,
                principal=principal,
                kb=kb,
                data=data,
                where=form.applied,
            )
        )
        candidate = next((c for c in candidates if c.version.pk == data.get("compare")), None)
        if candidate is not None:
            sides.append(
                _side(
                    title=candidate.title,
                    principal=principal,
                    kb=kb,
                    data=data,
                    where=form.applied,
                    candidate=candidate,
                )
            )
            comparison = index_version_comparison(
                active=kb.active_index_version, candidate=candidate.version
            )
            compare_title = candidate.column_title
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Test search: %(name)s") % {"name": kb.name},
        "kb": kb,
        "form": form,
        "sides": sides,
        "comparison": comparison,
        "compare_title": compare_title,
        "shared": _shared(sides),
        # what the columns' numbers mean, said once (both columns search in one mode)
        "meanings": list(dict.fromkeys(s.scores.meaning for s in sides if s.rows and s.scores)),
        "applied": form.applied if sides else None,
        "builder": ["where_field", "where_op", "where_value"],
        # "This hit answers the question": the query becomes a question of a set (evaluation)
        "answer": search_answer_context(request, kb) if sides else None,
        "here": request.get_full_path(),
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
