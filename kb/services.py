"""Writes of knowledge-base state: knowledge bases, uploads and the switch that publishes builds.

Locks are taken through `kb.locks` in the one order knowledge base -> document -> build -> task.
No function here does network or file-parsing I/O inside a transaction.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from ingestion import faults
from ingestion.leases import Lease, lease_check
from ingestion.models import IngestionTask
from ingestion.services import task_create
from kb import locks, selectors
from kb.models import (
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

logger = logging.getLogger(__name__)

PIPELINE_VERSION = "p1"

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
    for version in selectors.live_index_versions(kb_id=document.kb_id):
        build = Build.objects.create(
            kb_id=document.kb_id,
            document=document,
            revision=revision,
            index_version=version,
            dimensions=version.dimensions,
        )
        task_create(
            kind=IngestionTask.Kind.BUILD,
            kb_id=document.kb_id,
            document_id=document.pk,
            build_id=build.pk,
        )
    return revision


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
    faults.after_outbox_commit()
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
    faults.after_outbox_commit()
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


class IncompleteBuild(Exception):
    """The build failed its completeness check; it must never be switched live."""


@dataclass(frozen=True)
class PublishResult:
    outcome: PublishOutcome
    build_id: int
    previous_build_id: int | None = None


def build_publish(
    *, build_id: int, lease: Lease | None = None, actor: Actor = None, approve: bool = False
) -> PublishResult:
    """The switch: make a complete build of the desired revision the live one, or change nothing.

    Runs in one short transaction (joins the caller's, if any) with no external I/O. Locks the
    document, then the build, then (with `lease`) the task — the one lock order. Checks, in order:
    the lease is still held (else LeaseLost); the build is not already decided; the document is
    not deleted and the build's revision is `desired_revision` (CAS; else the build is superseded
    unpublished, so a late or duplicate event can never move the pointer back); completeness
    (else IncompleteBuild). Then, if the knowledge base requires approval and this is not an
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
        problems = selectors.build_completeness(build_id=build.pk).problems(
            expected_count=build.expected_chunk_count,
            dimensions=build.index_version.dimensions,
            manifest=build.manifest_sha256,
        )
        if problems:
            raise IncompleteBuild(f"build {build.pk} is incomplete: {'; '.join(problems)}")
        if build.kb.require_approval and not approve:
            if build.state != Build.State.READY:
                build.state = Build.State.READY
                build.finished_at = timezone.now()
                build.save(update_fields=["state", "finished_at", "updated_at"])
            return PublishResult(PublishOutcome.AWAITING_APPROVAL, build.pk)
        return _pointer_move(document=document, build=build, actor=actor, approve=approve)


def _pointer_move(
    *, document: Document, build: Build, actor: Actor, approve: bool, reason: str = ""
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
        Build.objects.filter(pk=previous_build_id).update(state=Build.State.SUPERSEDED)
    build.state = Build.State.LIVE
    build.finished_at = build.finished_at or now
    build.save(update_fields=["state", "finished_at", "updated_at"])
    PublicationEvent.objects.create(
        kb_id=build.kb_id,
        document=document,
        index_version_id=build.index_version_id,
        action=PublicationEvent.Action.APPROVE if approve else PublicationEvent.Action.PUBLISH,
        build=build,
        previous_build_id=previous_build_id,
        revision_number=build.revision.number,
        actor_id=_actor_id(actor),
        reason=reason,
    )
    return PublishResult(PublishOutcome.PUBLISHED, build.pk, previous_build_id)
