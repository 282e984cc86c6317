"""Admin pages that act on a source or a run: *Sync now*, pause and resume (a source), and the
answer to the deletions a run holds (confirm or keep), each behind its confirmation page, plus
the run's progress JSON its page polls.

Each page checks its permission first (`sources.sync_source` to sync and answer deletions,
`sources.change_source` to pause or resume: content managers get the refusal page), then finds
its object through the tenant-scoped admin, so another tenant's id, a malformed one and a
missing one are the same 404. The work is done by `sources.services`."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext, gettext_lazy, ngettext

from console.admin.confirmation import confirm, require
from console.admin.scoping import TenantScopedAdmin, may_read
from console.admin.sync_words import deletion_note_words
from kb.document_states import purge_delay, utc_text
from sources.models import Source, SourceItem, SyncRun
from sources.selectors import run_progress
from sources.services.runs import sync_deletions_confirm, sync_deletions_keep, sync_request
from sources.services.sources import source_pause

SOURCE_HISTORY = gettext_lazy("Why? Kept in the source's history.")
RUN_HISTORY = gettext_lazy(
    "Why? Shown on the run's page, in the timeline and in each document's history."
)
NAMED_DELETIONS = 200  # documents named on the confirmation page; the rest are counted


def source_url(source: Source) -> str:
    return reverse("admin:sources_source_change", args=[source.pk])


def run_url(run: SyncRun) -> str:
    return reverse("admin:sources_syncrun_change", args=[run.pk])


def schedule_text(source: Source) -> str:
    every = source.sync_every_minutes
    if not every:
        return gettext("only when someone asks")
    return ngettext("every %(n)s minute", "every %(n)s minutes", every) % {"n": every}


def next_sync_text(source: Source) -> str:
    """When the next run starts, for people: a paused source's schedule is shown as stopped."""
    if not source.enabled:
        return gettext("none while paused: no run starts until it is resumed")
    if not source.sync_every_minutes:
        return gettext("when someone asks (no schedule)")
    if source.next_sync_at is None or source.next_sync_at <= timezone.now():
        return gettext("due now: within a minute")
    return utc_text(source.next_sync_at)


def location_text(source: Source) -> str:
    """Where the source reads, in one line (its settings, never its credentials)."""
    config = source.config or {}
    for key in ("path", "start_url", "sitemap_url", "url"):
        if config.get(key):
            return str(config[key])
    if config.get("bucket"):
        prefix = str(config.get("prefix") or "")
        return f"s3://{config['bucket']}/{prefix}"
    return "—"


def _with_reason(text: str, reason: str) -> str:
    return (
        gettext("%(action)s: %(reason)s") % {"action": text, "reason": reason} if reason else text
    )


def _source(model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str) -> Source:
    source: Source = model_admin.get_scoped_object_or_404(request, object_id)
    return source


def _run(model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str) -> SyncRun:
    run: SyncRun = model_admin.get_scoped_object_or_404(request, object_id)
    return run


def sync_view(model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    require(request, "sources.sync_source")
    source = _source(model_admin, request, object_id)
    open_run = SyncRun.objects.filter(source=source, state__in=SyncRun.OPEN_STATES).first()

    def perform(reason: str, expected: int | None) -> str:
        run, created = sync_request(
            source=source, trigger=SyncRun.Trigger.MANUAL, actor=request.user
        )
        model_admin.log_change(
            request,
            source,
            _with_reason(gettext("Asked for sync run %(id)s") % {"id": run.pk}, reason),
        )
        words = {"id": run.pk, "source": source}
        if created:
            return (
                gettext("Sync run %(id)s of %(source)s is queued; its progress is below.") % words
            )
        return (
            gettext("Sync run %(id)s of %(source)s was already under way; its progress is below.")
            % words
        )

    facts = [
        (
            gettext("source"),
            gettext("%(source)s (%(kind)s)")
            % {"source": source, "kind": source.get_kind_display()},
        ),
        (gettext("knowledge base"), str(source.kb)),
        (gettext("reads"), location_text(source)),
        (
            gettext("the run"),
            gettext(
                "lists the source, submits a revision of each new or changed item (into the "
                "approval queue), and deletes the documents of items gone from the source"
            )
            if source.kb.require_approval
            else gettext(
                "lists the source, submits a revision of each new or changed item, and deletes "
                "the documents of items gone from the source"
            ),
        ),
        (
            gettext("deletions"),
            gettext(
                "none after a failed or cut-short listing; more than %(percent)s %% of the "
                "source's documents wait for your confirmation"
            )
            % {"percent": source.delete_threshold_percent},
        ),
    ]
    if open_run is not None:
        facts.append(
            (
                gettext("under way"),
                gettext("run %(id)s (%(state)s): no second run starts; you are taken to it")
                % {"id": open_run.pk, "state": open_run.get_state_display()},
            )
        )
    problems = (
        []
        if source.enabled
        else [gettext("%(source)s is paused; resume it to sync it.") % {"source": source}]
    )
    return confirm(
        model_admin,
        request,
        title=gettext("Sync %(source)s now") % {"source": source},
        summary={"facts": facts, "problems": problems},
        expected=None,
        perform=perform,
        back=source_url(source),
        reason_help=SOURCE_HISTORY,
    )


def _pause_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str, *, paused: bool
) -> HttpResponse:
    require(request, "sources.change_source")
    source = _source(model_admin, request, object_id)

    def perform(reason: str, expected: int | None) -> str:
        source_pause(source=source, paused=paused)
        model_admin.log_change(
            request,
            source,
            _with_reason(gettext("Paused") if paused else gettext("Resumed"), reason),
        )
        if paused:
            return gettext("%(source)s is paused.") % {"source": source}
        return gettext("%(source)s is resumed.") % {"source": source}

    if paused:
        facts = [
            (
                gettext("after"),
                gettext("no run starts, on schedule or on request, until it is resumed"),
            ),
            (
                gettext("a run under way"),
                gettext("stops at its next progress save, deleting nothing"),
            ),
            (gettext("its documents"), gettext("stay as they are, served")),
        ]
    else:
        facts = [
            (gettext("schedule"), schedule_text(source)),
            (
                gettext("after"),
                gettext("a scheduled source syncs at once, then on its schedule")
                if source.sync_every_minutes
                else gettext("it syncs when someone asks"),
            ),
        ]
    same = (not source.enabled) == paused
    already = (
        gettext("%(source)s is paused already.")
        if paused
        else gettext("%(source)s is enabled already.")
    ) % {"source": source}
    title = gettext("Pause %(source)s") if paused else gettext("Resume %(source)s")
    return confirm(
        model_admin,
        request,
        title=title % {"source": source},
        summary={
            "facts": [(gettext("source"), str(source)), *facts],
            "problems": [already] if same else [],
        },
        expected=None,
        perform=perform,
        back=source_url(source),
        reason_help=SOURCE_HISTORY,
    )


def pause_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    return _pause_view(model_admin, request, object_id, paused=True)


def resume_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    return _pause_view(model_admin, request, object_id, paused=False)


def pending_deletions(request: HttpRequest, run: SyncRun) -> dict[str, Any]:
    """The documents `run` holds for deletion: the ones the user may read by name (the first
    NAMED_DELETIONS), the others only counted."""
    items = (
        SourceItem.objects.filter(pending_delete_run=run, document__isnull=False)
        .select_related("document__kb")
        .order_by("path")
    )
    named: list[dict[str, Any]] = []
    total = hidden = 0
    for item in items.iterator():
        total += 1
        document = item.document
        assert document is not None
        if not may_read(request, document):
            hidden += 1
        elif len(named) < NAMED_DELETIONS:
            named.append(
                {
                    "path": item.path,
                    "title": document.title or document.key,
                    "url": reverse("admin:kb_document_change", args=[document.pk]),
                }
            )
    return {
        "named": named,
        "hidden": hidden,
        "total": total,
        "unlisted": total - hidden - len(named),
    }


def _awaiting_problems(run: SyncRun) -> list[str]:
    if run.state == SyncRun.State.AWAITING_CONFIRMATION:
        return []
    return [
        gettext("Sync run %(id)s holds no deletions (it is %(state)s).")
        % {"id": run.pk, "state": run.get_state_display()}
    ]


def confirm_deletions_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    require(request, "sources.sync_source")
    run = _run(model_admin, request, object_id)
    source = run.source
    deletions = pending_deletions(request, run)
    days = purge_delay(source.kb)

    def perform(reason: str, expected: int | None) -> str:
        deleted = sync_deletions_confirm(run_id=run.pk, actor=request.user, reason=reason)
        model_admin.log_change(
            request,
            run,
            _with_reason(
                ngettext(
                    "Confirmed the deletion of %(n)s document",
                    "Confirmed the deletion of %(n)s documents",
                    deleted,
                )
                % {"n": deleted},
                reason,
            ),
        )
        return ngettext(
            "Deleted %(n)s document of %(source)s; it is restorable on its page for the "
            "retention window.",
            "Deleted %(n)s documents of %(source)s; each is restorable on its page for the "
            "retention window.",
            deleted,
        ) % {"n": deleted, "source": source}

    return confirm(
        model_admin,
        request,
        title=gettext("Delete the documents sync run %(id)s of %(source)s holds")
        % {"id": run.pk, "source": source},
        summary={
            "facts": [
                (gettext("source"), str(source)),
                (gettext("why it waits"), deletion_note_words(run) or "—"),
                (
                    gettext("documents"),
                    ngettext("%(n)s would be deleted", "%(n)s would be deleted", deletions["total"])
                    % {"n": deletions["total"]},
                ),
                (gettext("after"), gettext("search stops returning them when you confirm")),
                (
                    gettext("restorable"),
                    gettext("each for %(duration)s (the knowledge base's retention), on its page")
                    % {"duration": _duration(days.total_seconds())},
                ),
            ],
            "problems": _awaiting_problems(run),
            "deletions": deletions,
        },
        expected=None,
        perform=perform,
        back=run_url(run),
        template="admin/sources/confirm_deletions.html",
        danger=True,
        reason_help=RUN_HISTORY,
    )


def keep_documents_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    require(request, "sources.sync_source")
    run = _run(model_admin, request, object_id)
    source = run.source
    deletions = pending_deletions(request, run)

    def perform(reason: str, expected: int | None) -> str:
        kept = sync_deletions_keep(run_id=run.pk, actor=request.user, reason=reason)
        model_admin.log_change(
            request,
            run,
            _with_reason(
                ngettext(
                    "Kept %(n)s document the run would have deleted",
                    "Kept %(n)s documents the run would have deleted",
                    kept,
                )
                % {"n": kept},
                reason,
            ),
        )
        return ngettext(
            "Kept %(n)s document of %(source)s.", "Kept %(n)s documents of %(source)s.", kept
        ) % {"n": kept, "source": source}

    return confirm(
        model_admin,
        request,
        title=gettext("Keep the documents sync run %(id)s of %(source)s would delete")
        % {"id": run.pk, "source": source},
        summary={
            "facts": [
                (gettext("source"), str(source)),
                (gettext("why it waits"), deletion_note_words(run) or "—"),
                (
                    gettext("documents"),
                    ngettext(
                        "%(n)s is kept, served as it is",
                        "%(n)s are kept, served as they are",
                        deletions["total"],
                    )
                    % {"n": deletions["total"]},
                ),
                (
                    gettext("after"),
                    gettext("the run closes; the next run that still misses them holds them again"),
                ),
            ],
            "problems": _awaiting_problems(run),
            "deletions": deletions,
        },
        expected=None,
        perform=perform,
        back=run_url(run),
        template="admin/sources/confirm_deletions.html",
        reason_help=RUN_HISTORY,
    )


def _duration(seconds: float) -> str:
    whole = int(seconds)
    if whole % 86400 == 0:
        days = whole // 86400
        return ngettext("%(n)s day", "%(n)s days", days) % {"n": days}
    if whole % 3600 == 0:
        return gettext("%(n)s h") % {"n": whole // 3600}
    return gettext("%(n)s s") % {"n": whole}


def run_progress_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> JsonResponse:
    """The run page's progress bar and counts (`run_progress`), polled by its script."""
    run = _run(model_admin, request, object_id)
    if not model_admin.has_view_permission(request, run):
        raise PermissionDenied(gettext("You need the permission to view sync runs."))
    return JsonResponse(run_progress(run))
