"""Writes of knowledge-base state: knowledge bases, uploads and the switch that publishes builds.

Locks are taken through `kb.locks` in the one order knowledge base -> document -> build -> task.
No function here does network or file-parsing I/O inside a transaction.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection, transaction
from django.db.models import F, Max, Q, QuerySet
from django.utils import timezone

from kb import document_states, locks, selectors
from kb.ann import STORAGES, ann_index_drop, ann_index_ensure, ann_index_ready
from kb.ann_build import ann_index_build_soon
from kb.completeness import IncompleteBuild, build_switch_problems
from kb.models import (
    PIPELINE_VERSION,
    Build,
    Document,
    IndexVersion,
    KnowledgeBase,
    Publication,
    PublicationEvent,
    Revision,
    Tenant,
)
from kb.storage import StoredFile
from kb.transactions import retry_conflicts
from work import faults
from work.leases import Lease, fenced, lease_check
from work.models import AuditEvent, IngestionTask
from work.outbox import outbox_add, task_create

logger = logging.getLogger(__name__)


Actor = AbstractBaseUser | AnonymousUser | None


def _actor_id(actor: Actor) -> int | None:
    return actor.pk if actor is not None and actor.is_authenticated else None


class InvalidUpload(ValueError):
    """An upload refused before anything was written; the message is for the uploader."""


# --- knowledge bases -----------------------------------------------------------------------


@transaction.atomic
def knowledge_base_create(
    *,
    tenant: Tenant,
    name: str,
    slug: str,
    require_approval: bool = False,
    provider: str | None = None,
    model: str | None = None,
    dimensions: int | None = None,
) -> KnowledgeBase:
    """Create a knowledge base with its first index version, active from the start."""
    kb = KnowledgeBase.objects.create(
        tenant=tenant, name=name, slug=slug, require_approval=require_approval
    )
    version = IndexVersion.objects.create(
        kb=kb,
        number=1,
        state=IndexVersion.State.ACTIVE,
        provider=provider or settings.EMBEDDING_PROVIDER,
        model=model or settings.EMBEDDING_MODEL,
        dimensions=dimensions or settings.EMBEDDING_DIMENSIONS,
        chunk_size=settings.CHUNK_SIZE,
        chunk_overlap=settings.CHUNK_OVERLAP,
        pipeline_version=PIPELINE_VERSION,
        activated_at=timezone.now(),
    )
    kb.active_index_version = version
    kb.save(update_fields=["active_index_version"])
    transaction.on_commit(lambda: ann_index_ensure(version_id=version.pk))
    return kb


# --- uploads -------------------------------------------------------------------------------


def _revision_add(
    *, document: Document, stored: StoredFile, media_type: str, original_name: str, actor: Actor
) -> Revision:
    """Add a revision and a build + task + outbox event per live index version.

    Caller holds the document lock (the next number is max + 1 under it).
    """
    last = document.revisions.aggregate(n=Max("number"))["n"] or 0
    revision = Revision.objects.create(
        document=document,
        number=last + 1,
        storage_path=stored.path,
        sha256=stored.sha256,
        size=stored.size,
        media_type=media_type,
        original_name=original_name[:255],
        uploaded_by_id=_actor_id(actor),
    )
    document.desired_revision = revision.number
    document.save(update_fields=["desired_revision", "updated_at"])
    # A candidate of an earlier revision waiting for approval can never go live now (the switch
    # would supersede it); say so at once instead of listing it as awaiting approval.
    Build.objects.filter(document=document, state=Build.State.READY).update(
        state=Build.State.SUPERSEDED,
        error=f"revision {revision.number} was uploaded after this one",
        updated_at=timezone.now(),
    )
    builds_ensure(document=document, revision=revision)
    return revision


def builds_ensure(*, document: Document, revision: Revision) -> int:
    """A build + task + outbox event of `revision` in every live index version that has none.
    Caller holds the document lock. Returns how many were created (idempotent)."""
    created = 0
    for version in selectors.live_index_versions(kb_id=document.kb_id):
        build, new = Build.objects.get_or_create(
            revision=revision,
            index_version=version,
            defaults={
                "kb_id": document.kb_id,
                "document": document,
                "dimensions": version.dimensions,
            },
        )
        if new:
            task_create(
                kind=IngestionTask.Kind.BUILD,
                kb_id=document.kb_id,
                document_id=document.pk,
                build_id=build.pk,
            )
            created += 1
    return created


def document_create(
    *,
    kb: KnowledgeBase,
    key: str,
    title: str,
    stored: StoredFile,
    media_type: str,
    original_name: str,
    access_groups: Sequence[str] = (),
    actor: Actor = None,
) -> Revision:
    """Create a document and its first revision in one transaction.

    The bytes must already be in storage (`kb.storage`): a crash before this commit leaves only
    an orphan file. Raises InvalidUpload if the key is taken.
    """
    with transaction.atomic():
        if Document.objects.filter(kb=kb, key=key).exists():
            raise InvalidUpload(f"A document with key {key!r} already exists in {kb}.")
        document = Document.objects.create(
            kb=kb, key=key, title=title or key, access_groups=sorted(set(access_groups))
        )
        revision = _revision_add(
            document=document,
            stored=stored,
            media_type=media_type,
            original_name=original_name,
            actor=actor,
        )
    return revision


def revision_create(
    *,
    document: Document,
    stored: StoredFile,
    media_type: str,
    original_name: str,
    actor: Actor = None,
) -> Revision:
    """Upload a new revision of an existing document; it becomes the desired revision at once
    (the live one keeps serving until its build is switched)."""
    with transaction.atomic():
        locked = locks.lock_document(document.pk)
        if locked.deleted_at is not None:
            raise InvalidUpload("The document is deleted; restore it before uploading a revision.")
        revision = _revision_add(
            document=locked,
            stored=stored,
            media_type=media_type,
            original_name=original_name,
            actor=actor,
        )
    return revision


def document_update(*, document: Document, title: str, access_groups: Sequence[str]) -> Document:
    """Edit metadata. Access-group changes take effect for search at commit."""
    document.title = title or document.key
    document.access_groups = sorted(set(access_groups))
    document.save(update_fields=["title", "access_groups", "updated_at"])
    return document


# --- the switch ----------------------------------------------------------------------------


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
            build.error = (
                "the document was deleted before this build finished"
                if document.deleted_at is not None
                else f"revision {document.desired_revision} was uploaded after this one"
            )
            build.finished_at = timezone.now()
            build.save(update_fields=["state", "error", "finished_at", "updated_at"])
            return PublishResult(PublishOutcome.STALE, build.pk)
        problems = build_switch_problems(build)
        if problems:
            raise IncompleteBuild(f"build {build.pk} is incomplete: {'; '.join(problems)}")
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
        actor_id=_actor_id(actor),
        reason=reason,
    )
    return PublishResult(PublishOutcome.PUBLISHED, build.pk, previous_build_id)


# --- approve, rollback, delete, restore ----------------------------------------------------


class ActionRefused(Exception):
    """An admin action that would change nothing or act on a stale view; the message says why."""


def _check_live(
    document: Document, index_version_id: int, expected_live_build_id: int | None
) -> None:
    """Optimistic check for admin actions: refuse if the live build changed since the page the
    admin confirmed was rendered (`expected_live_build_id`; None = do not check)."""
    if expected_live_build_id is None:
        return
    live_id = selectors.live_build_id(document=document, index_version_id=index_version_id)
    if live_id != expected_live_build_id:
        raise ActionRefused("The live version changed since you opened this page; review it again.")


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
            raise ActionRefused(f"Build {build.pk} is {build.state}, not waiting for approval.")
        result = build_publish(build_id=build_id, actor=actor, approve=True, reason=reason)
        if result.outcome is not PublishOutcome.PUBLISHED:
            raise ActionRefused(
                f"Build {build.pk} was not published: a newer revision is desired or the "
                "document was deleted."
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
            raise ActionRefused("That build belongs to another document.")
        if document.deleted_at is not None:
            raise ActionRefused("The document is deleted; restore it first.")
        _check_live(document, build.index_version_id, expected_live_build_id)
        if build.state == Build.State.LIVE:
            raise ActionRefused(f"Build {build.pk} is already live.")
        if build.state != Build.State.SUPERSEDED:
            raise ActionRefused(
                f"Build {build.pk} is {build.state}, not a retained earlier version."
            )
        problems = build_switch_problems(build)
        if problems:
            raise ActionRefused(f"Build {build.pk} is not retained complete: {'; '.join(problems)}")
        document.desired_revision = build.revision.number
        document.save(update_fields=["desired_revision", "updated_at"])
        # Newer candidates waiting for approval can never go live now.
        Build.objects.filter(
            document=document, state=Build.State.READY, revision__number__gt=build.revision.number
        ).update(
            state=Build.State.SUPERSEDED,
            error=f"rolled back to revision {build.revision.number}",
            updated_at=timezone.now(),
        )
        return _pointer_move(
            document=document,
            build=build,
            actor=actor,
            reason=reason,
            action=PublicationEvent.Action.ROLLBACK,
        )


def _purge_delay_seconds(kb: KnowledgeBase) -> float:
    return document_states.purge_delay(kb).total_seconds()


def _visibility_event(
    document: Document, *, action: str, actor: Actor, reason: str
) -> KnowledgeBase:
    """Record a delete or restore against the live build of the active version."""
    kb = KnowledgeBase.objects.get(pk=document.kb_id)
    PublicationEvent.objects.create(
        kb_id=kb.pk,
        document=document,
        index_version_id=kb.active_index_version_id,
        action=action,
        build_id=selectors.live_build_id(
            document=document, index_version_id=kb.active_index_version_id
        ),
        actor_id=_actor_id(actor),
        reason=reason,
    )
    return kb


def document_delete(*, document_id: int, actor: Actor = None, reason: str = "") -> Document:
    """Soft delete: invisible to search when this transaction commits. Writes a
    PublicationEvent and schedules physical cleanup after the retention window. Idempotent."""
    with transaction.atomic():
        document = locks.lock_document(document_id)
        if document.deleted_at is not None:
            return document
        document.deleted_at = timezone.now()
        document.save(update_fields=["deleted_at", "updated_at"])
        kb = _visibility_event(
            document, action=PublicationEvent.Action.DELETE, actor=actor, reason=reason
        )
        task_create(
            kind=IngestionTask.Kind.DELETE,
            kb_id=kb.pk,
            document_id=document.pk,
            delay=_purge_delay_seconds(kb),
        )
    return document


def document_restore(*, document_id: int, actor: Actor = None, reason: str = "") -> Document:
    """Undo a soft delete while the chunks are retained: the pointer serves again at commit."""
    with transaction.atomic():
        document = locks.lock_document(document_id)
        if document.deleted_at is None:
            raise ActionRefused("The document is not deleted.")
        if document.purged_at is not None:
            raise ActionRefused("The retention window has passed; the document was purged.")
        document.deleted_at = None
        document.save(update_fields=["deleted_at", "updated_at"])
        _rebuild_desired_after_restore(document)
        _visibility_event(
            document, action=PublicationEvent.Action.RESTORE, actor=actor, reason=reason
        )
    return document


def _rebuild_desired_after_restore(document: Document) -> None:
    """A build of the desired revision that finished while the document was deleted was
    superseded unpublished; queue it again so the restored document catches up (its stage
    results are reused, so this costs only the switch)."""
    if document.desired_revision is None:
        return
    published = PublicationEvent.objects.filter(document=document, build__isnull=False)
    for build in Build.objects.filter(
        document=document,
        revision__number=document.desired_revision,
        state=Build.State.SUPERSEDED,
        collected_at__isnull=True,
    ).exclude(pk__in=published.values("build_id")):
        task = build.tasks.order_by("-id").first()
        if task is None or task.status in IngestionTask.OPEN_STATUSES:
            continue
        Build.objects.filter(pk=build.pk).update(
            state=Build.State.PENDING, error="", updated_at=timezone.now()
        )
        IngestionTask.objects.filter(pk=task.pk).update(
            status=IngestionTask.Status.QUEUED,
            attempt=0,
            available_at=timezone.now(),
            finished_at=None,
            lease_owner="",
            lease_expires_at=None,
        )
        outbox_add(task=task)


PURGE_BATCH = 5000


def document_purge(*, document_id: int, lease: Lease) -> int:
    """Physically remove a deleted document's chunks and pointers, then mark it purged.

    First, in one transaction under the document lock, the one-way door: pointers removed,
    every build given up (`collected_at`) and `purged_at` set, so a restore from here on is
    refused and can never serve a half-deleted build. Then the chunks go in fenced batches.
    A no-op if the document was restored first or deleted again later (the later delete's task
    purges); idempotent, also after a crash halfway. Returns the number of chunks removed.
    Document, Revision and Build rows stay as history.
    """
    with transaction.atomic():
        document = locks.lock_document(document_id)
        lease_check(lease)
        if document.deleted_at is None:
            return 0
        if IngestionTask.objects.filter(
            kind=IngestionTask.Kind.DELETE, document_id=document_id, pk__gt=lease.task_id
        ).exists():
            # Deleted again after a restore: the later delete's own task purges, once its
            # retention window has passed.
            return 0
        if document.purged_at is None:
            now = timezone.now()
            Publication.objects.filter(document_id=document_id).delete()
            Build.objects.filter(document_id=document_id, state=Build.State.LIVE).update(
                state=Build.State.SUPERSEDED
            )
            Build.objects.filter(document_id=document_id, collected_at__isnull=True).update(
                collected_at=now, verified_at=None
            )
            document.purged_at = now
            document.save(update_fields=["purged_at", "updated_at"])
    removed = 0
    while True:
        with fenced(lease), connection.cursor() as cursor:
            if removed == 0:
                _lexical_statistics_forget(cursor, builds_of_document=document_id)
            batch = _chunks_delete(
                cursor,
                "SELECT id FROM kb_chunk WHERE document_id = %s LIMIT %s",
                [document_id, PURGE_BATCH],
            )
        removed += batch
        if batch < PURGE_BATCH:
            Build.objects.filter(document_id=document_id).update(chunks_written=0)
            return removed


# --- index versions ------------------------------------------------------------------------


def index_version_create(
    *,
    kb_id: int,
    provider: str,
    model: str,
    dimensions: int,
    chunk_size: int,
    chunk_overlap: int,
    actor: Actor = None,
    vector_storage: str = "vector",
) -> IndexVersion:
    """A new embedding space / pipeline for a knowledge base. It starts *building*: every
    non-deleted document's desired revision is built into it as a candidate while the active
    version keeps serving. Its chunks are written with no HNSW index; the index is built once
    they all are (`kb.ann_build`), and only then can it be swapped in. `vector_storage`
    ("vector" or "halfvec") is what that index holds (`kb.ann`)."""
    if vector_storage not in STORAGES:
        raise ActionRefused(f"Unknown vector storage {vector_storage!r}: one of {STORAGES}.")
    with transaction.atomic():
        kb = locks.lock_knowledge_base(kb_id)
        number = (kb.index_versions.aggregate(n=Max("number"))["n"] or 0) + 1
        version = IndexVersion.objects.create(
            kb=kb,
            number=number,
            state=IndexVersion.State.BUILDING,
            provider=provider,
            model=model,
            dimensions=dimensions,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            pipeline_version=PIPELINE_VERSION,
            vector_storage=vector_storage,
        )
        revisions = Revision.objects.filter(
            document__kb=kb,
            document__deleted_at__isnull=True,
            document__desired_revision=F("number"),
        )
        for revision in revisions:
            build = Build.objects.create(
                kb=kb,
                document_id=revision.document_id,
                revision=revision,
                index_version=version,
                dimensions=dimensions,
            )
            task_create(
                kind=IngestionTask.Kind.BUILD,
                kb_id=kb.pk,
                document_id=revision.document_id,
                build_id=build.pk,
            )
        AuditEvent.objects.create(
            kind="index_version_created",
            kb=kb,
            subject_type="index_version",
            subject_id=version.pk,
            action=(
                f"v{number}: building {revisions.count()} documents with "
                f"{selectors.index_version_settings_line(version)}"
            ),
            actor_id=_actor_id(actor),
            details={"settings": selectors.index_version_settings_record(version)},
        )
    # Due at once only if there is nothing to build; else after the last build (kb.ann_build).
    transaction.on_commit(lambda: ann_index_build_soon(version_id=version.pk))
    return version


def index_version_coverage_gaps(*, version: IndexVersion) -> list[str]:
    """What keeps `version` from serving the whole knowledge base: every non-deleted document
    with a desired revision needs a live, complete build of exactly that revision in it."""
    gaps = []
    documents = Document.objects.filter(
        kb_id=version.kb_id, deleted_at__isnull=True, desired_revision__isnull=False
    ).order_by("key")
    live = {
        p.document_id: p.build
        for p in Publication.objects.filter(index_version=version).select_related("build__revision")
    }
    for document in documents:
        build = live.get(document.pk)
        if build is None:
            gaps.append(f"{document.key}: no live build yet")
        elif build.revision.number != document.desired_revision:
            live_number, desired = build.revision.number, document.desired_revision
            gaps.append(f"{document.key}: live r{live_number}, desired r{desired}")
    return gaps


@retry_conflicts
def index_version_activate(
    *,
    version_id: int,
    actor: Actor,
    reason: str = "",
    expected_active_id: int | None = None,
    action: str = "swap",
) -> IndexVersion:
    """Swap the knowledge base's active index version in one transaction, after the coverage
    check. The previous active version is retired (kept for rollback during retention).

    Locks the knowledge base row first, so concurrent swaps serialize; with
    `expected_active_id` the loser is refused instead of swapping twice. Raises ActionRefused.
    """
    with transaction.atomic():
        version = IndexVersion.objects.get(pk=version_id)
        kb = locks.lock_knowledge_base(version.kb_id)
        if expected_active_id is not None and kb.active_index_version_id != expected_active_id:
            raise ActionRefused(
                "The active index version changed since you opened this page; review it again."
            )
        if kb.active_index_version_id == version.pk:
            raise ActionRefused(f"Index version {version.number} is already active.")
        if version.state == IndexVersion.State.FAILED:
            raise ActionRefused(f"Index version {version.number} failed; it cannot serve.")
        if version.state == IndexVersion.State.RETIRED and not index_version_retained(version):
            raise ActionRefused(f"Index version {version.number} is past its retention window.")
        gaps = index_version_coverage_gaps(version=version)
        if gaps:
            raise ActionRefused(
                f"Index version {version.number} does not cover the knowledge base yet: "
                + "; ".join(gaps[:20])
                + (f"; and {len(gaps) - 20} more" if len(gaps) > 20 else "")
            )
        if not ann_index_ready(version.pk):
            raise ActionRefused(
                f"Index version {version.number} covers the knowledge base, but its vector index "
                "is still being built; the swap is possible once it is."
            )
        now = timezone.now()
        previous_id = kb.active_index_version_id
        previous = IndexVersion.objects.filter(pk=previous_id).first() if previous_id else None
        if previous_id is not None:
            IndexVersion.objects.filter(pk=previous_id).update(
                state=IndexVersion.State.RETIRED, retired_at=now
            )
        IndexVersion.objects.filter(pk=version.pk).update(
            state=IndexVersion.State.ACTIVE, activated_at=now, retired_at=None
        )
        kb.active_index_version_id = version.pk
        kb.save(update_fields=["active_index_version"])
        AuditEvent.objects.create(
            kind=f"index_version_{action}",
            kb=kb,
            subject_type="index_version",
            subject_id=version.pk,
            action=(
                f"active v{version.number} ({selectors.index_version_settings_line(version)}); "
                + (
                    f"was v{previous.number} ({selectors.index_version_settings_line(previous)})"
                    if previous
                    else "none was active"
                )
            ),
            actor_id=_actor_id(actor),
            details={
                "previous_id": previous_id,
                "reason": reason,
                "from": selectors.index_version_settings_record(previous),
                "to": selectors.index_version_settings_record(version),
            },
        )
        version.refresh_from_db()
        return version


def index_version_retained(version: IndexVersion) -> bool:
    if version.state != IndexVersion.State.RETIRED or version.retired_at is None:
        return version.state != IndexVersion.State.RETIRED
    kb = KnowledgeBase.objects.get(pk=version.kb_id)
    return version.retired_at >= timezone.now() - timedelta(days=kb.retention_days)


def index_version_rollback(*, kb_id: int, actor: Actor, reason: str = "") -> IndexVersion:
    """Re-activate the previous version: `kb.selectors.index_version_rollback_target`, the most
    recently retired one still retained and older than the active one (never forward). Uploads
    made since the swap were built into it too, so a rollback never serves stale text. The
    knowledge base is locked and re-checked by `index_version_activate`."""
    kb = KnowledgeBase.objects.select_related("active_index_version").get(pk=kb_id)
    previous = selectors.index_version_rollback_target(kb=kb)
    if previous is None:
        raise ActionRefused("There is no earlier retained index version to roll back to.")
    return index_version_activate(
        version_id=previous.pk,
        actor=actor,
        reason=reason,
        expected_active_id=kb.active_index_version_id,
        action="rollback",
    )


# --- retry -----------------------------------------------------------------------------------


def build_retry(*, build_id: int, actor: Actor = None, reason: str = "") -> IngestionTask:
    """Run a failed build again (after a provider outage, a parser fix, …): the build goes back
    to pending and its task to queued with a fresh attempt budget; `reason` is kept in the audit
    event. Raises ActionRefused."""
    with transaction.atomic():
        build = locks.lock_build(build_id)
        if build.state != Build.State.FAILED:
            raise ActionRefused(f"Build {build.pk} is {build.state}; only failed builds retry.")
        task = locks.lock_task(build.tasks.order_by("-id").values_list("id", flat=True)[0])
        assert task is not None  # deleted only with its build, which this transaction holds
        build.state = Build.State.PENDING
        build.error = ""
        build.finished_at = None
        build.save(update_fields=["state", "error", "finished_at", "updated_at"])
        task.status = IngestionTask.Status.QUEUED
        task.attempt = 0
        task.last_error = ""
        task.last_error_code = ""
        task.finished_at = None
        task.available_at = timezone.now()
        task.save()
        outbox_add(task=task)
        AuditEvent.objects.create(
            kind="build_retry",
            kb_id=build.kb_id,
            subject_type="build",
            subject_id=build.pk,
            action="requeued",
            actor_id=_actor_id(actor),
            details={"reason": reason} if reason else {},
        )
        return task


# --- retention -----------------------------------------------------------------------------

GC_LOCK_KEY = 0x43616E6F6E03
GC_BATCH = 5000


def _build_give_up(build_id: int, eligible: QuerySet[Build], now: datetime) -> None:
    """Mark one build collected under its lock, if it is still eligible once the lock is held.

    A rollback locks the build too and then points a Publication at it, so the two serialize:
    the re-check after the lock sees a rollback that won, and a rollback that comes second sees
    `collected_at` and refuses. Only after this mark are the build's chunks deleted.
    """
    with transaction.atomic():
        locks.lock_build(build_id)
        eligible.filter(pk=build_id).update(collected_at=now, verified_at=None)


def retention_collect(*, max_batches: int = 20) -> int:
    """Garbage-collect what the retention window no longer protects, in bounded batches:
    chunks of superseded builds and of retired index versions (whose HNSW index is dropped).

    Never touches a build that a Publication points at, that an open task references, or that
    waits for approval (state ready). A build is first given up under its lock
    (`_build_give_up`), then its chunks are deleted, so nothing can point at a half-deleted
    build; a crash in between is finished by the next run. Singleton via an advisory lock;
    idempotent. Returns the number of chunk rows deleted.
    """
    deleted = 0
    with locks.singleton(GC_LOCK_KEY) as held:
        if not held:
            return 0
        now = timezone.now()
        for kb in KnowledgeBase.objects.all():
            cutoff = now - timedelta(days=kb.retention_days)
            for version in IndexVersion.objects.filter(
                kb=kb,
                state=IndexVersion.State.RETIRED,
                retired_at__lt=cutoff,
                collected_at__isnull=True,
            ):
                with transaction.atomic():
                    locks.lock_knowledge_base(kb.pk)
                    if KnowledgeBase.objects.filter(active_index_version=version).exists():
                        continue
                    Publication.objects.filter(index_version=version).delete()
                    Build.objects.filter(index_version=version).update(
                        state=Build.State.SUPERSEDED, updated_at=now
                    )
                    IndexVersion.objects.filter(pk=version.pk).update(collected_at=now)
            eligible = (
                Build.objects.filter(kb=kb, collected_at__isnull=True)
                .filter(
                    Q(state=Build.State.SUPERSEDED, updated_at__lt=cutoff)
                    | Q(state=Build.State.FAILED, updated_at__lt=cutoff)
                    | Q(index_version__collected_at__isnull=False)
                )
                .exclude(pk__in=Publication.objects.values("build_id"))
                .exclude(tasks__status__in=IngestionTask.OPEN_STATUSES)
            )
            for build_id in eligible.values_list("pk", flat=True)[:1000]:
                _build_give_up(build_id, eligible, now)
        # Chunks of given-up builds, including those a crashed run left behind.
        for build_id in Build.objects.filter(
            collected_at__isnull=False, chunks_written__gt=0
        ).values_list("pk", flat=True)[:1000]:
            while max_batches > 0:
                max_batches -= 1
                with connection.cursor() as cursor:
                    _lexical_statistics_forget(cursor, build=build_id)
                    batch = _chunks_delete(
                        cursor,
                        "SELECT id FROM kb_chunk WHERE build_id = %s LIMIT %s",
                        [build_id, GC_BATCH],
                    )
                deleted += batch
                if batch < GC_BATCH:
                    Build.objects.filter(pk=build_id).update(chunks_written=0, verified_at=None)
                    break
            if max_batches <= 0:
                return deleted
        for version_id in IndexVersion.objects.filter(collected_at__isnull=False).values_list(
            "pk", flat=True
        ):
            if not Build.objects.filter(
                index_version_id=version_id, collected_at__isnull=True
            ).exists():
                ann_index_drop(version_id=version_id)
    return deleted


def _chunks_delete(cursor: Any, select_ids: str, params: list[Any]) -> int:
    """Delete the chunks `select_ids` (a constant SELECT of chunk ids) chooses, their keyword
    postings with them; returns how many chunks went. The caller gave their build up first."""
    cursor.execute(
        f"WITH gone AS MATERIALIZED ({select_ids}), "  # noqa: S608 (a constant; values are bound)
        "postings AS (DELETE FROM kb_posting WHERE chunk_id IN (SELECT id FROM gone)) "
        "DELETE FROM kb_chunk WHERE id IN (SELECT id FROM gone)",
        params,
    )
    return int(cursor.rowcount)


def _lexical_statistics_forget(
    cursor: Any, *, build: int | None = None, builds_of_document: int | None = None
) -> None:
    """A given-up build leaves its index version's BM25 statistics before its chunks go."""
    if build is not None:
        cursor.execute("DELETE FROM kb_lexicalstat WHERE build_id = %s", [build])
    else:
        cursor.execute(
            "DELETE FROM kb_lexicalstat WHERE build_id IN "
            "(SELECT id FROM kb_build WHERE document_id = %s)",
            [builds_of_document],
        )
