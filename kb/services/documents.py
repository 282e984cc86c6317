"""Writes of documents: uploads (a document, a new revision, and the builds they need), edits,
delete, restore and purge, and retrying a failed build.

Locks are taken through `kb.locks` in the one order knowledge base -> document -> build -> task.
No function here does network or file-parsing I/O inside a transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.translation import gettext, gettext_lazy

from kb import document_states, locks
from kb.failures import SUPERSEDED_BY_REVISION, failure_fields
from kb.models import (
    Build,
    Document,
    KnowledgeBase,
    Publication,
    PublicationEvent,
    Revision,
)
from kb.selectors.builds import live_build_id
from kb.selectors.index_versions import live_index_versions
from kb.services.base import ActionRefused, Actor, InvalidUpload, actor_id
from kb.services.metadata import checked_metadata
from kb.services.retention import (
    chunks_delete,
    lexical_statistics_forget,
)
from kb.storage import StoredFile
from work.leases import Lease, fenced, lease_check
from work.models import AuditEvent, IngestionTask
from work.outbox import outbox_add, task_create


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
        uploaded_by_id=actor_id(actor),
    )
    document.desired_revision = revision.number
    document.save(update_fields=["desired_revision", "updated_at"])
    # A candidate of an earlier revision waiting for approval can never go live now (the switch
    # would supersede it); say so at once instead of listing it as awaiting approval.
    Build.objects.filter(document=document, state=Build.State.READY).update(
        state=Build.State.SUPERSEDED,
        **failure_fields(SUPERSEDED_BY_REVISION(revision=str(revision.number))),
        updated_at=timezone.now(),
    )
    builds_ensure(document=document, revision=revision)
    return revision


def builds_ensure(*, document: Document, revision: Revision) -> int:
    """A build + task + outbox event of `revision` in every live index version that has none.
    Caller holds the document lock. Returns how many were created (idempotent)."""
    created = 0
    for version in live_index_versions(kb_id=document.kb_id):
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
    metadata: Mapping[str, Any] | None = None,
    actor: Actor = None,
) -> Revision:
    """Create a document and its first revision in one transaction.

    The bytes must already be in storage (`kb.storage`): a crash before this commit leaves only
    an orphan file. Raises InvalidUpload if the key is taken, MetadataInvalid if `metadata`
    does not fit the knowledge base's fields (`kb.metadata`).
    """
    with transaction.atomic():
        stored_metadata = checked_metadata(kb, metadata)
        if Document.objects.filter(kb=kb, key=key).exists():
            raise InvalidUpload(
                gettext("A document with key %(key)s already exists in %(kb)s.")
                % {"key": repr(key), "kb": kb}
            )
        document = Document.objects.create(
            kb=kb,
            key=key,
            title=title or key,
            access_groups=sorted(set(access_groups)),
            metadata=stored_metadata,
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
            raise InvalidUpload(
                gettext("The document is deleted; restore it before uploading a revision.")
            )
        revision = _revision_add(
            document=locked,
            stored=stored,
            media_type=media_type,
            original_name=original_name,
            actor=actor,
        )
    return revision


def document_update(
    *,
    document: Document,
    title: str | None = None,
    access_groups: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    seen: Mapping[str, Any] | None = None,
) -> Document:
    """Edit metadata: only the fields given (None leaves a field as stored), so an edit of one
    field never writes back another. An empty title is the key. Access-group changes take
    effect for search at commit.

    With `seen` — the values the editor's page showed, by field name — it is a compare-and-set:
    under the document lock (`kb.locks`, the document row alone), a field given whose stored
    value is no longer the one shown refuses the whole edit with ActionRefused, so a page left
    open never writes over a value it did not show (the title the parse stage found meanwhile,
    groups someone else changed). Idempotent: the same edit again writes the same values."""
    changes: dict[str, Any] = {}
    if title is not None:
        changes["title"] = title or document.key
    if access_groups is not None:
        changes["access_groups"] = sorted(set(access_groups))
    if not changes and metadata is None:
        return document
    with transaction.atomic():
        if metadata is not None:
            # The whole object: fields left out are removed (MetadataInvalid if one misfits).
            changes["metadata"] = checked_metadata(document.kb, metadata)
        current = locks.lock_document(document.pk)
        for name, value in (seen or {}).items():
            stored = getattr(current, name)
            if name in changes and _comparable(stored) != _comparable(value):
                raise ActionRefused(
                    gettext(
                        "The %(field)s of %(key)s changed since you opened its page (it is now "
                        "%(value)s); review it and save again."
                    )
                    % {
                        "field": FIELD_WORDS.get(name, name.replace("_", " ")),
                        "key": current.key,
                        "value": _shown(stored),
                    }
                )
        for name, value in changes.items():
            setattr(current, name, value)
            setattr(document, name, value)
        current.save(update_fields=[*changes, "updated_at"])
    return document


def _comparable(value: Any) -> Any:
    if isinstance(value, list | tuple | set | frozenset):
        return sorted(set(value))
    return (value or "").strip() if isinstance(value, str | None) else value


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(value) or gettext("none")
    return f"“{value}”"


# The document's fields as a refusal names them.
FIELD_WORDS = {
    "title": gettext_lazy("title"),
    "access_groups": gettext_lazy("access groups"),
    "metadata": gettext_lazy("metadata"),
}


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
        build_id=live_build_id(document=document, index_version_id=kb.active_index_version_id),
        actor_id=actor_id(actor),
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
            raise ActionRefused(gettext("The document is not deleted."))
        if document.purged_at is not None:
            raise ActionRefused(
                gettext("The retention window has passed; the document was purged.")
            )
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
            state=Build.State.PENDING, **failure_fields(None), updated_at=timezone.now()
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
                lexical_statistics_forget(cursor, builds_of_document=document_id)
            batch = chunks_delete(
                cursor,
                "SELECT id FROM kb_chunk WHERE document_id = %s LIMIT %s",
                [document_id, PURGE_BATCH],
            )
        removed += batch
        if batch < PURGE_BATCH:
            Build.objects.filter(document_id=document_id).update(chunks_written=0)
            return removed


def build_retry(*, build_id: int, actor: Actor = None, reason: str = "") -> IngestionTask:
    """Run a failed build again (after a provider outage, a parser fix, …): the build goes back
    to pending and its task to queued with a fresh attempt budget; `reason` is kept in the audit
    event. Only a build of the desired revision retries (`kb.selectors.builds.current_failure_q`:
    an older revision's failure is history). Raises ActionRefused."""
    with transaction.atomic():
        # the lock order: the document (its desired revision is read), then the build
        document = locks.lock_document(
            Build.objects.values_list("document_id", flat=True).get(pk=build_id)
        )
        build = locks.lock_build(build_id)
        if build.state != Build.State.FAILED:
            raise ActionRefused(
                gettext("Build %(id)s is %(state)s; only failed builds retry.")
                % {"id": build.pk, "state": build.state}
            )
        desired = document.desired_revision
        if build.revision.number != desired:
            raise ActionRefused(
                gettext(
                    "Build %(id)s is of revision %(revision)s, no longer the current one "
                    "(r%(desired)s): its failure is history, there is nothing to retry."
                )
                % {"id": build.pk, "revision": build.revision.number, "desired": desired}
            )
        task = locks.lock_task(build.tasks.order_by("-id").values_list("id", flat=True)[0])
        assert task is not None  # deleted only with its build, which this transaction holds
        build.state = Build.State.PENDING
        cleared = failure_fields(None)
        for field, value in cleared.items():
            setattr(build, field, value)
        build.finished_at = None
        build.save(update_fields=["state", *cleared, "finished_at", "updated_at"])
        task.status = IngestionTask.Status.QUEUED
        task.attempt = 0
        task.last_error = ""
        task.last_error_code = ""
        task.last_error_reason, task.last_error_params = "", {}
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
            actor_id=actor_id(actor),
            details={"reason": reason} if reason else {},
        )
        return task
