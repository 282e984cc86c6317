"""The switch and what moves the live pointer: publish (the switch), approve, and roll back.

A pointer moves only here, in one short transaction holding the document and build locks, by
compare-and-set on the document's desired revision, so a late or duplicate event never moves it
back."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext

from kb import locks
from kb.completeness import build_switch_problems, incomplete_build
from kb.failures import DOCUMENT_DELETED, ROLLED_BACK, SUPERSEDED_BY_REVISION, failure_fields
from kb.models import (
    Build,
    Document,
    Publication,
    PublicationEvent,
)
from kb.selectors.builds import live_build_id
from kb.services.base import ActionRefused, Actor, actor_id
from kb.transactions import retry_conflicts
from work import faults
from work.leases import Lease, lease_check


class PublishOutcome(enum.Enum):
    PUBLISHED = "published"
    AWAITING_APPROVAL = "awaiting_approval"
    STALE = "stale"  # the build's revision is no longer desired, or the document is deleted
    ALREADY_DONE = "already_done"


@dataclass(frozen=True)
class PublishResult:
    outcome: PublishOutcome
    build_id: int
    previous_build_id: int | None = None


@retry_conflicts
def build_publish(
    *,
    build_id: int,
    lease: Lease | None = None,
    actor: Actor = None,
    approve: bool = False,
    reason: str = "",
) -> PublishResult:
    """The switch: make a complete build of the desired revision the live one, or change nothing.

    Runs in one short transaction (joins the caller's, if any) with no external I/O. Locks the
    document, then the build, then (with `lease`) the task — the one lock order. Checks, in order:
    the lease is still held (else LeaseLost); the build is not already decided; the document is
    not deleted and the build's revision is `desired_revision` (CAS; else the build is superseded
    unpublished, so a late or duplicate event can never move the pointer back); completeness as
    the write stage verified it, read from the build row so the switch is O(1) in the build's
    size (else IncompleteBuild). Then, if the knowledge base requires approval and this is not an
    approval, the build waits as ready; otherwise the Publication points at it, the previous build
    becomes superseded (retained for rollback) and a PublicationEvent is written.

    Idempotent: publishing a build that is already live returns ALREADY_DONE.
    """
    with transaction.atomic():
        build_row = Build.objects.only("document_id").get(pk=build_id)
        document = locks.lock_document(build_row.document_id)
        build = locks.lock_build(build_id)
        if lease is not None:
            lease_check(lease)
        faults.pause_point("in_switch")
        if build.state in (Build.State.LIVE, Build.State.SUPERSEDED, Build.State.FAILED):
            return PublishResult(PublishOutcome.ALREADY_DONE, build.pk)
        if document.deleted_at is not None or build.revision.number != document.desired_revision:
            build.state = Build.State.SUPERSEDED
            why = failure_fields(
                DOCUMENT_DELETED()
                if document.deleted_at is not None
                else SUPERSEDED_BY_REVISION(revision=str(document.desired_revision))
            )
            for field, value in why.items():
                setattr(build, field, value)
            build.finished_at = timezone.now()
            build.save(update_fields=["state", *why, "finished_at", "updated_at"])
            return PublishResult(PublishOutcome.STALE, build.pk)
        problems = build_switch_problems(build)
        if problems:
            raise incomplete_build(build.pk, problems)
        if build.kb.require_approval and not approve and not _revision_approved(build):
            if build.state != Build.State.READY:
                build.state = Build.State.READY
                build.finished_at = timezone.now()
                build.save(update_fields=["state", "finished_at", "updated_at"])
            return PublishResult(PublishOutcome.AWAITING_APPROVAL, build.pk)
        return _pointer_move(
            document=document, build=build, actor=actor, approve=approve, reason=reason
        )


def _pointer_move(
    *,
    document: Document,
    build: Build,
    actor: Actor,
    approve: bool = False,
    reason: str = "",
    action: str | None = None,
) -> PublishResult:
    """Point (document, index version) at `build`. Caller holds the document and build locks."""
    now = timezone.now()
    publication = (
        Publication.objects.select_for_update(no_key=True)
        .filter(document=document, index_version_id=build.index_version_id)
        .first()
    )
    previous_build_id = publication.build_id if publication else None
    if publication is None:
        Publication.objects.create(
            kb_id=build.kb_id,
            document=document,
            index_version_id=build.index_version_id,
            build=build,
            published_at=now,
        )
    else:
        publication.build = build
        publication.published_at = now
        publication.save(update_fields=["build", "published_at"])
    if previous_build_id is not None and previous_build_id != build.pk:
        # updated_at marks the start of the retention window (update() skips auto_now)
        Build.objects.filter(pk=previous_build_id).update(
            state=Build.State.SUPERSEDED, updated_at=now
        )
    build.state = Build.State.LIVE
    build.finished_at = build.finished_at or now
    build.save(update_fields=["state", "finished_at", "updated_at"])
    PublicationEvent.objects.create(
        kb_id=build.kb_id,
        document=document,
        index_version_id=build.index_version_id,
        action=action
        or (PublicationEvent.Action.APPROVE if approve else PublicationEvent.Action.PUBLISH),
        build=build,
        previous_build_id=previous_build_id,
        revision_number=build.revision.number,
        actor_id=actor_id(actor),
        reason=reason,
    )
    return PublishResult(PublishOutcome.PUBLISHED, build.pk, previous_build_id)


def _check_live(
    document: Document, index_version_id: int, expected_live_build_id: int | None
) -> None:
    """Optimistic check for admin actions: refuse if the live build changed since the page the
    admin confirmed was rendered (`expected_live_build_id`; None = do not check)."""
    if expected_live_build_id is None:
        return
    live_id = live_build_id(document=document, index_version_id=index_version_id)
    if live_id != expected_live_build_id:
        raise ActionRefused(
            gettext("The live version changed since you opened this page; review it again.")
        )


@retry_conflicts
def build_approve(
    *,
    build_id: int,
    actor: Actor,
    reason: str = "",
    expected_live_build_id: int | None = None,
) -> PublishResult:
    """Approve a ready build: the switch, by an admin. Raises ActionRefused when the build is not
    waiting for approval any more, is not of the desired revision, or the live build moved."""
    with transaction.atomic():
        build_row = Build.objects.only("document_id").get(pk=build_id)
        document = locks.lock_document(build_row.document_id)
        build = locks.lock_build(build_id)
        _check_live(document, build.index_version_id, expected_live_build_id)
        if build.state != Build.State.READY:
            raise ActionRefused(
                gettext("Build %(id)s is %(state)s, not waiting for approval.")
                % {"id": build.pk, "state": build.state}
            )
        result = build_publish(build_id=build_id, actor=actor, approve=True, reason=reason)
        if result.outcome is not PublishOutcome.PUBLISHED:
            raise ActionRefused(
                gettext(
                    "Build %(id)s was not published: a newer revision is desired or the "
                    "document was deleted."
                )
                % {"id": build.pk}
            )
        # Approval is of the revision: its ready builds in other index versions follow.
        for other in Build.objects.filter(
            revision_id=build.revision_id, state=Build.State.READY
        ).exclude(pk=build.pk):
            build_publish(build_id=other.pk, actor=actor, approve=True, reason=reason)
        return result


def _revision_approved(build: Build) -> bool:
    """Whether this build's revision was already published or approved in some index version
    (then a build of it in another version, e.g. a re-index candidate, needs no new approval)."""
    return PublicationEvent.objects.filter(
        document_id=build.document_id,
        revision_number=build.revision.number,
        action__in=[
            PublicationEvent.Action.PUBLISH,
            PublicationEvent.Action.APPROVE,
            PublicationEvent.Action.ROLLBACK,
        ],
    ).exists()


@retry_conflicts
def document_rollback(
    *,
    document_id: int,
    build_id: int,
    actor: Actor,
    reason: str = "",
    expected_live_build_id: int | None = None,
) -> PublishResult:
    """Point the document back at a retained earlier build and make its revision the desired
    one, so no late event for a newer revision can undo the rollback. Raises ActionRefused."""
    with transaction.atomic():
        document = locks.lock_document(document_id)
        build = locks.lock_build(build_id)
        if build.document_id != document.pk:
            raise ActionRefused(gettext("That build belongs to another document."))
        if document.deleted_at is not None:
            raise ActionRefused(gettext("The document is deleted; restore it first."))
        _check_live(document, build.index_version_id, expected_live_build_id)
        if build.state == Build.State.LIVE:
            raise ActionRefused(gettext("Build %(id)s is already live.") % {"id": build.pk})
        if build.state != Build.State.SUPERSEDED:
            raise ActionRefused(
                gettext("Build %(id)s is %(state)s, not a retained earlier version.")
                % {"id": build.pk, "state": build.state}
            )
        problems = build_switch_problems(build)
        if problems:
            raise ActionRefused(
                gettext("Build %(id)s is not retained complete: %(problems)s")
                % {"id": build.pk, "problems": "; ".join(problems)}
            )
        document.desired_revision = build.revision.number
        document.save(update_fields=["desired_revision", "updated_at"])
        # Newer candidates waiting for approval can never go live now.
        Build.objects.filter(
            document=document, state=Build.State.READY, revision__number__gt=build.revision.number
        ).update(
            state=Build.State.SUPERSEDED,
            **failure_fields(ROLLED_BACK(revision=str(build.revision.number))),
            updated_at=timezone.now(),
        )
        return _pointer_move(
            document=document,
            build=build,
            actor=actor,
            reason=reason,
            action=PublicationEvent.Action.ROLLBACK,
        )
