"""Bulk admin actions on documents — approve, retry, delete, restore — each behind a confirmation
page that lists exactly which documents (and builds) will change and which are skipped and why.

Each action declares its permission (Django's `allowed_permissions`, so a user without it is not
offered it) and checks it again. The confirmation page carries the plan it showed (document,
build, and the build served when it was shown) and a reason; on confirm each planned item is
done by the single-object service of `kb.services`, one transaction per item, so one refusal
(a state that moved meanwhile) is reported beside the others' success rather than undoing them.
Planned documents are looked up again in the changelist's scoped queryset, never trusted from
the form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.contrib import admin, messages
from django.db.models import F, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from console.admin.confirmation import ReasonForm, confirm_label, require
from kb import document_states
from kb.diff import ChunkDiff, chunk_diff
from kb.document_states import utc_text
from kb.models import Build, Document, Publication
from kb.services.base import ActionRefused
from kb.services.documents import build_retry, document_delete, document_restore
from kb.services.publication import build_approve

# At most this many documents per bulk action: the plan is one page, and each item is its own
# transaction inside one request.
BULK_MAX = 500
# How many names a result message lists before "and N more".
NAMES_IN_MESSAGE = 20
# How many changed, added or removed chunks each document's diff shows on bulk approve.
BULK_DIFF_ROWS = 8
EACH_DOCUMENT_HISTORY = "Why? Kept in each document's history."


@dataclass(frozen=True)
class Item:
    """One change the action will make: on `document`, to `build` (approve, retry), with the
    build served when the plan was shown (`expected`, approve's compare-and-set token);
    `search_changes`: whether search answers differently once it is done (deleting a document
    nothing is served of does not change search); `diff`: approve's chunk diff."""

    document: Document
    change: str
    build: Build | None = None
    expected: int | None = None
    search_changes: bool = True
    diff: ChunkDiff | None = None

    @property
    def token(self) -> str:
        build = self.build.pk if self.build else ""
        expected = "" if self.expected is None else self.expected
        return f"{self.document.pk}:{build}:{expected}"


@dataclass
class Plan:
    items: list[Item] = field(default_factory=list)
    skipped: list[tuple[Document, str]] = field(default_factory=list)

    @property
    def changing(self) -> int:
        """How many documents change (retry may rebuild one document in several versions)."""
        return len({item.document.pk for item in self.items})

    @property
    def search_changes(self) -> bool:
        return any(item.search_changes for item in self.items)


@dataclass(frozen=True)
class BulkAction:
    name: str
    perm: str
    permission: str  # the ModelAdmin's has_<permission>_permission
    verb: str  # "Approve"
    done: str  # "approved"
    danger: bool
    plan: Callable[[list[Document]], Plan]
    perform: Callable[[HttpRequest, Item, str], str]  # -> the History line


def _served(ids: list[int]) -> dict[int, Build]:
    return {
        p.document_id: p.build
        for p in Publication.objects.filter(
            document_id__in=ids, index_version_id=F("document__kb__active_index_version_id")
        ).select_related("build__revision")
    }


def _serving(build: Build | None) -> str:
    return f"serving r{build.revision.number}" if build else "nothing served"


# --- approve -------------------------------------------------------------------------------------


def _approve_plan(documents: list[Document]) -> Plan:
    ids = [d.pk for d in documents]
    served = _served(ids)
    waiting = {
        b.document_id: b
        for b in Build.objects.filter(
            document_id__in=ids,
            state=Build.State.READY,
            index_version_id=F("document__kb__active_index_version_id"),
            revision__number=F("document__desired_revision"),
        ).select_related("revision")
    }
    plan = Plan()
    for document in documents:
        live = served.get(document.pk)
        candidate = waiting.get(document.pk)
        if document.deleted_at is not None:
            plan.skipped.append((document, "deleted"))
        elif candidate is None:
            plan.skipped.append((document, f"nothing awaits approval ({_serving(live)})"))
        else:
            change = f"r{candidate.revision.number} goes live ({_serving(live)} now)"
            diff = chunk_diff(candidate=candidate, live=live, max_rows=BULK_DIFF_ROWS)
            plan.items.append(
                Item(document, change, candidate, live.pk if live else None, diff=diff)
            )
    return plan


def _approve(request: HttpRequest, item: Item, reason: str) -> str:
    assert item.build is not None
    build_approve(
        build_id=item.build.pk,
        actor=request.user,
        reason=reason,
        expected_live_build_id=item.expected,
    )
    return f"Approved revision {item.build.revision.number}"


# --- retry ---------------------------------------------------------------------------------------


def _retry_plan(documents: list[Document]) -> Plan:
    ids = [d.pk for d in documents]
    failed: dict[int, list[Build]] = {}
    for b in (
        Build.objects.filter(
            document_id__in=ids,
            state=Build.State.FAILED,
            revision__number=F("document__desired_revision"),
            collected_at__isnull=True,
        )
        .select_related("revision", "index_version")
        .order_by("index_version__number")
    ):
        failed.setdefault(b.document_id, []).append(b)
    plan = Plan()
    for document in documents:
        builds = failed.get(document.pk, [])
        if document.deleted_at is not None:
            plan.skipped.append((document, "deleted; restore it first"))
        elif not builds:
            plan.skipped.append((document, "no failed build of its desired revision"))
        for build in builds if document.deleted_at is None else []:
            error = f" (failed: {build.error})" if build.error else ""
            change = (
                f"r{build.revision.number} in v{build.index_version.number} builds again{error}"
            )
            plan.items.append(Item(document, change, build))
    return plan


def _retry(request: HttpRequest, item: Item, reason: str) -> str:
    assert item.build is not None
    build_retry(build_id=item.build.pk, actor=request.user, reason=reason)
    return (
        f"Retried the build of revision {item.build.revision.number} "
        f"in v{item.build.index_version.number}"
    )


# --- delete and restore ------------------------------------------------------------------------


def _delete_plan(documents: list[Document]) -> Plan:
    served = _served([d.pk for d in documents])
    plan = Plan()
    for document in documents:
        if document.deleted_at is not None:
            plan.skipped.append((document, f"already deleted ({utc_text(document.deleted_at)})"))
            continue
        until = utc_text(document_states.restorable_until(document=document))
        live = served.get(document.pk)
        if live is None:
            change = (
                "marked deleted; nothing of it is served, so search does not change; "
                f"restorable until {until}"
            )
            plan.items.append(Item(document, change, search_changes=False))
            continue
        change = f"search stops returning it ({_serving(live)} now); restorable until {until}"
        plan.items.append(Item(document, change))
    return plan


def _delete(request: HttpRequest, item: Item, reason: str) -> str:
    document = Document.objects.get(pk=item.document.pk)
    if document.deleted_at is not None:
        raise ActionRefused("It was deleted meanwhile.")
    document_delete(document_id=item.document.pk, actor=request.user, reason=reason)
    return "Deleted"


def _restore_plan(documents: list[Document]) -> Plan:
    served = _served([d.pk for d in documents])
    plan = Plan()
    for document in documents:
        if document.deleted_at is None:
            plan.skipped.append((document, "not deleted"))
        elif document.purged_at is not None:
            plan.skipped.append(
                (document, f"purged {utc_text(document.purged_at)}: past its retention")
            )
        else:
            kept = served.get(document.pk)
            if kept is None:
                then = "restored; nothing of it to serve, so search does not change"
                plan.items.append(Item(document, then, search_changes=False))
            else:
                plan.items.append(Item(document, f"search serves r{kept.revision.number} again"))
    return plan


def _restore(request: HttpRequest, item: Item, reason: str) -> str:
    document_restore(document_id=item.document.pk, actor=request.user, reason=reason)
    return "Restored"


ACTIONS = {
    a.name: a
    for a in [
        BulkAction(
            "approve_selected",
            "kb.approve_build",
            "approve",
            "Approve",
            "approved",
            False,
            _approve_plan,
            _approve,
        ),
        BulkAction(
            "retry_selected",
            "kb.retry_build",
            "retry",
            "Retry failed builds of",
            "retried",
            False,
            _retry_plan,
            _retry,
        ),
        BulkAction(
            "delete_selected_documents",
            "kb.soft_delete_document",
            "soft_delete",
            "Delete",
            "deleted",
            True,
            _delete_plan,
            _delete,
        ),
        BulkAction(
            "restore_selected",
            "kb.restore_document",
            "restore",
            "Restore",
            "restored",
            False,
            _restore_plan,
            _restore,
        ),
    ]
}


def _names(documents: list[str]) -> str:
    shown = ", ".join(documents[:NAMES_IN_MESSAGE])
    more = len(documents) - NAMES_IN_MESSAGE
    return shown + (f" and {more} more" if more > 0 else "")


def _planned(
    request: HttpRequest, queryset: QuerySet[Document], action: BulkAction
) -> tuple[list[Item], list[str]]:
    """The items the confirmation page showed (its hidden `plan` fields), planned again from the
    scoped queryset: a token counts only if it names a selected document the user may see and a
    build the plan still picks for it. Returns those items, and a line for each shown item that
    no longer applies (its state moved since the page was rendered)."""
    tokens: list[tuple[int, int | None, int | None]] = []
    for token in request.POST.getlist("plan"):
        parts = token.split(":")
        if len(parts) == 3 and parts[0].isdigit() and all(p.isdigit() or not p for p in parts):
            build_id, expected = (int(p) if p else None for p in parts[1:])
            tokens.append((int(parts[0]), build_id, expected))
    documents = list(queryset.filter(pk__in={t[0] for t in tokens}).select_related("kb"))
    fresh = action.plan(documents)
    by_build = {(i.document.pk, i.build.pk if i.build else None): i for i in fresh.items}
    why = {d.pk: reason for d, reason in fresh.skipped}
    keys = {d.pk: d.key for d in documents}
    items, moved = [], []
    for document_id, build_id, expected in sorted(tokens, key=lambda t: (t[0], t[1] or 0)):
        item = by_build.get((document_id, build_id))
        if item is not None:
            # approve acts on what the page showed as served: a moved pointer is refused
            items.append(Item(item.document, item.change, item.build, expected))
        elif document_id in keys:
            moved.append(
                f"{keys[document_id]}: changed since the page was shown"
                + (f" ({why[document_id]})" if document_id in why else "")
            )
    return items, moved


def run_bulk_action(
    model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Document], name: str
) -> HttpResponse | None:
    """The admin action `name`: its confirmation page, or (confirmed with a reason) each planned
    item through its service, with one message per outcome. None: back to the list."""
    action = ACTIONS[name]
    require(request, action.perm)
    count = queryset.count()
    if count > BULK_MAX:
        messages.error(
            request,
            f"Select at most {BULK_MAX} documents for one bulk action (you selected {count}).",
        )
        return None
    form = ReasonForm(
        request.POST if request.POST.get("post") == "yes" else None,
        reason_help=EACH_DOCUMENT_HISTORY,
    )
    if request.POST.get("post") == "yes" and form.is_valid():
        items, moved = _planned(request, queryset, action)
        _perform(model_admin, request, action, items, moved, form)
        return None
    documents = list(queryset.select_related("kb").order_by("kb__slug", "key"))
    plan = action.plan(documents)
    # the title and the button count what changes; the skipped ones are listed with why
    changing = plan.changing
    title = f"{action.verb} {changing} document{'s' if changing != 1 else ''}"
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "confirm_label": confirm_label(title),
        "action": action,
        "plan": plan,
        "selected": documents,
        "selected_count": count,
        "form": form,
        # a dangerous action looks dangerous only when search would change
        "danger": action.danger and plan.search_changes,
        "back": request.get_full_path(),
        "opts": model_admin.model._meta,
        "summary": {},
    }
    return TemplateResponse(request, "admin/kb/document/bulk_confirm.html", context)


def _perform(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    action: BulkAction,
    items: list[Item],
    moved: list[str],
    form: ReasonForm,
) -> None:
    reason = form.cleaned_data["reason"]
    done: list[str] = []
    refused: list[str] = list(moved)
    for item in items:
        label = item.document.key + (
            f" r{item.build.revision.number}" if item.build is not None else ""
        )
        try:
            line = action.perform(request, item, reason)
        except ActionRefused as exc:
            refused.append(f"{label}: {exc}")
            continue
        model_admin.log_change(request, item.document, f"{line} (bulk action): {reason}")
        done.append(label)
    if done:
        messages.success(request, f"{action.done.capitalize()} {len(done)}: {_names(done)}.")
    for line in refused[:NAMES_IN_MESSAGE]:
        messages.error(request, f"Not {action.done}: {line}")
    if len(refused) > NAMES_IN_MESSAGE:
        messages.error(request, f"… and {len(refused) - NAMES_IN_MESSAGE} more not {action.done}.")
    if not items and not moved:
        messages.warning(request, f"Nothing was {action.done}: no selected document needed it.")


def admin_actions() -> list[Callable[..., Any]]:
    """The Django admin action functions, one per bulk action, with their permissions."""

    def make(action: BulkAction) -> Callable[..., Any]:
        def run(
            model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Document]
        ) -> HttpResponse | None:
            return run_bulk_action(model_admin, request, queryset, action.name)

        run.__name__ = action.name
        return admin.action(
            description=f"{action.verb} selected documents…",
            permissions=[action.permission],
        )(run)

    return [make(a) for a in ACTIONS.values()]
