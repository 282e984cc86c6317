"""The document list's filters: by state (with counts, the work queues' entry points) and by
knowledge base (shown even when the user has only one, so the list always says which)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy

from console.admin.scoping import ScopedRelatedFieldListFilter
from kb import document_states

KB_PARAMETER = "kb__id__exact"


class DocumentStatusFilter(admin.SimpleListFilter):
    """Served, building, awaiting approval, failed, deleted, not served: computed in SQL
    (`kb.document_states.document_state_q`), each choice with how many documents are in it among
    those the user sees (in the chosen knowledge base, if one is chosen)."""

    title = gettext_lazy("status")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        documents = model_admin.get_queryset(request)
        kb_id = request.GET.get(KB_PARAMETER, "")
        if kb_id.isdigit():
            documents = documents.filter(kb_id=int(kb_id))
        counts = document_states.document_state_counts(documents)
        return [
            (state, f"{label} ({counts[state]})")
            for state, label in document_states.STATE_LABELS.items()
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in document_states.STATE_LABELS:
            return queryset.filter(document_states.document_state_q(value))
        return queryset


class KnowledgeBaseFilter(ScopedRelatedFieldListFilter):
    """The scoped knowledge-base filter, shown with a single choice too (Django hides a filter
    with fewer than two), so a user with one knowledge base still sees which one they are in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.title = gettext_lazy("knowledge base")  # the field's own name would say "By kb"

    def has_output(self) -> bool:
        return len(self.lookup_choices) >= 1
