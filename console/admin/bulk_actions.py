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
from django.utils.translation import gettext, gettext_lazy, ngettext_lazy

from console.admin.confirmation import ReasonForm, confirm_label, require
from kb import document_states
from kb.diff import ChunkDiff, chunk_diff
from kb.document_states import utc_text
from kb.failures import build_error_words
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
EACH_DOCUMENT_HISTORY = gettext_lazy("Why? Kept in each document's history.")


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
class BulkWords:
    """What an action's pages and messages say, each a whole sentence for translators: the
    page's title (counting the documents that change, `%(n)s`), the action's entry in the list's
    menu, and its outcomes."""

    title: Any  # "Approve %(n)s documents"
    description: Any  # "Approve selected documents…"
    done: Any  # "Approved %(n)s: %(names)s."
    not_done: Any  # "Not approved: %(line)s"
    more_not_done: Any  # "… and %(n)s more not approved."
    nothing: Any  # "Nothing was approved: no selected document needed it."


@dataclass(frozen=True)
class BulkAction:
    name: str
    perm: str
    permission: str  # the ModelAdmin's has_<permission>_permission
    words: BulkWords
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
    return (
        gettext("serving r%(n)s") % {"n": build.revision.number}
        if build
        else gettext("nothing served")
    )


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
            plan.skipped.append((document, gettext("deleted")))
        elif candidate is None:
            plan.skipped.append(
                (document, gettext("nothing awaits approval (%(now)s)") % {"now": _serving(live)})
            )
        else:
            change = gettext("r%(n)s goes live (%(now)s now)") % {
                "n": candidate.revision.number,
                "now": _serving(live),
            }
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
    return gettext("Approved revision %(n)s") % {"n": item.build.revision.number}


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
            plan.skipped.append((document, gettext("deleted; restore it first")))
        elif not builds:
            plan.skipped.append((document, gettext("no failed build of its desired revision")))
        for build in builds if document.deleted_at is None else []:
            words = {"r": build.revision.number, "v": build.index_version.number}
            change = (
                gettext("r%(r)s in v%(v)s builds again (failed: %(error)s)")
                % {**words, "error": build_error_words(build)}
                if build.error
                else gettext("r%(r)s in v%(v)s builds again") % words
            )
            plan.items.append(Item(document, change, build))
    return plan


def _retry(request: HttpRequest, item: Item, reason: str) -> str:
    assert item.build is not None
    build_retry(build_id=item.build.pk, actor=request.user, reason=reason)
    return gettext("Retried the build of revision %(n)s in v%(v)s") % {
        "n": item.build.revision.number,
        "v": item.build.index_version.number,
    }


# --- delete and restore ------------------------------------------------------------------------


def _delete_plan(documents: list[Document]) -> Plan:
    served = _served([d.pk for d in documents])
    plan = Plan()
    for document in documents:
        if document.deleted_at is not None:
            plan.skipped.append(
                (
                    document,
                    gettext("already deleted (%(at)s)") % {"at": utc_text(document.deleted_at)},
                )
            )
            continue
        until = utc_text(document_states.restorable_until(document=document))
        live = served.get(document.pk)
        if live is None:
            change = gettext(
                "marked deleted; nothing of it is served, so search does not change; "
                "restorable until %(until)s"
            ) % {"until": until}
            plan.items.append(Item(document, change, search_changes=False))
            continue
        change = gettext("search stops returning it (%(now)s now); restorable until %(until)s") % {
            "now": _serving(live),
            "until": until,
        }
        plan.items.append(Item(document, change))
    return plan


def _delete(request: HttpRequest, item: Item, reason: str) -> str:
    document = Document.objects.get(pk=item.document.pk)
    if document.deleted_at is not None:
        raise ActionRefused(gettext("It was deleted meanwhile."))
    document_delete(document_id=item.document.pk, actor=request.user, reason=reason)
    return gettext("Deleted")


def _restore_plan(documents: list[Document]) -> Plan:
    served = _served([d.pk for d in documents])
    plan = Plan()
    for document in documents:
        if document.deleted_at is None:
            plan.skipped.append((document, gettext("not deleted")))
        elif document.purged_at is not None:
            plan.skipped.append(
                (
                    document,
                    gettext("purged %(at)s: past its retention")
                    % {"at": utc_text(document.purged_at)},
                )
            )
        else:
            kept = served.get(document.pk)
            if kept is None:
                then = gettext("restored; nothing of it to serve, so search does not change")
                plan.items.append(Item(document, then, search_changes=False))
            else:
                plan.items.append(
                    Item(
                        document,
                        gettext("search serves r%(n)s again") % {"n": kept.revision.number},
                    )
                )
    return plan


def _restore(request: HttpRequest, item: Item, reason: str) -> str:
    document_restore(document_id=item.document.pk, actor=request.user, reason=reason)
    return gettext("Restored")


ACTIONS = {
    a.name: a
    for a in [
        BulkAction(
            "approve_selected",
            "kb.approve_build",
            "approve",
            BulkWords(
                ngettext_lazy("Approve %(n)s document", "Approve %(n)s documents", "n"),
                gettext_lazy("Approve selected documents…"),
                ngettext_lazy("Approved %(n)s: %(names)s.", "Approved %(n)s: %(names)s.", "n"),
                gettext_lazy("Not approved: %(line)s"),
                gettext_lazy("… and %(n)s more not approved."),
                gettext_lazy("Nothing was approved: no selected document needed it."),
            ),
            False,
            _approve_plan,
            _approve,
        ),
        BulkAction(
            "retry_selected",
            "kb.retry_build",
            "retry",
            BulkWords(
                ngettext_lazy(
                    "Retry failed builds of %(n)s document",
                    "Retry failed builds of %(n)s documents",
                    "n",
                ),
                gettext_lazy("Retry failed builds of selected documents…"),
                ngettext_lazy("Retried %(n)s: %(names)s.", "Retried %(n)s: %(names)s.", "n"),
                gettext_lazy("Not retried: %(line)s"),
                gettext_lazy("… and %(n)s more not retried."),
                gettext_lazy("Nothing was retried: no selected document needed it."),
            ),
            False,
            _retry_plan,
            _retry,
        ),
        BulkAction(
            "delete_selected_documents",
            "kb.soft_delete_document",
            "soft_delete",
            BulkWords(
                ngettext_lazy("Delete %(n)s document", "Delete %(n)s documents", "n"),
                gettext_lazy("Delete selected documents…"),
                ngettext_lazy("Deleted %(n)s: %(names)s.", "Deleted %(n)s: %(names)s.", "n"),
                gettext_lazy("Not deleted: %(line)s"),
                gettext_lazy("… and %(n)s more not deleted."),
                gettext_lazy("Nothing was deleted: no selected document needed it."),
            ),
            True,
            _delete_plan,
            _delete,
        ),
        BulkAction(
            "restore_selected",
            "kb.restore_document",
            "restore",
            BulkWords(
                ngettext_lazy("Restore %(n)s document", "Restore %(n)s documents", "n"),
                gettext_lazy("Restore selected documents…"),
                ngettext_lazy("Restored %(n)s: %(names)s.", "Restored %(n)s: %(names)s.", "n"),
                gettext_lazy("Not restored: %(line)s"),
                gettext_lazy("… and %(n)s more not restored."),
                gettext_lazy("Nothing was restored: no selected document needed it."),
            ),
            False,
            _restore_plan,
            _restore,
        ),
    ]
}


def _names(documents: list[str]) -> str:
    shown = ", ".join(documents[:NAMES_IN_MESSAGE])
    more = len(documents) - NAMES_IN_MESSAGE
    if more > 0:
        return gettext("%(names)s and %(n)s more") % {"names": shown, "n": more}
    return shown


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
                gettext("%(key)s: changed since the page was shown (%(why)s)")
                % {"key": keys[document_id], "why": why[document_id]}
                if document_id in why
                else gettext("%(key)s: changed since the page was shown")
                % {"key": keys[document_id]}
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
            gettext("Select at most %(max)s documents for one bulk action (you selected %(n)s).")
            % {"max": BULK_MAX, "n": count},
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
    title = action.words.title % {"n": changing}
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
            refused.append(gettext("%(what)s: %(why)s") % {"what": label, "why": exc})
            continue
        model_admin.log_change(
            request,
            item.document,
            gettext("%(line)s (bulk action): %(reason)s") % {"line": line, "reason": reason},
        )
        done.append(label)
    words = action.words
    if done:
        messages.success(request, words.done % {"n": len(done), "names": _names(done)})
    for line in refused[:NAMES_IN_MESSAGE]:
        messages.error(request, words.not_done % {"line": line})
    if len(refused) > NAMES_IN_MESSAGE:
        messages.error(request, words.more_not_done % {"n": len(refused) - NAMES_IN_MESSAGE})
    if not items and not moved:
        messages.warning(request, str(words.nothing))


def admin_actions() -> list[Callable[..., Any]]:
    """The Django admin action functions, one per bulk action, with their permissions."""

    def make(action: BulkAction) -> Callable[..., Any]:
        def run(
            model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Document]
        ) -> HttpResponse | None:
            return run_bulk_action(model_admin, request, queryset, action.name)

        run.__name__ = action.name
        return admin.action(
            description=action.words.description,
            permissions=[action.permission],
        )(run)

    return [make(a) for a in ACTIONS.values()]
