"""What a sync run does to one item: submit its bytes as a revision through the upload service,
record why it took nothing, or delete its document because it left the source.

A machine never undoes a person's decision: the sync restores a document only while the deletion
it holds is the one the sync made (`SourceItem.sync_deleted_at`); a person's deletion stands
until a person restores it, whatever the source does.

Lock order: the source item row, then the document (`kb.locks`, inside the upload and delete
services), then builds and tasks. Every write is idempotent: the item's version is written in
the transaction that makes the revision, so a retried or duplicated run finds it and submits
nothing twice; a delete of an item already gone, or seen again by a later run, does nothing.
Each write records the run's outcome for the item on its row (`last_seen_run`, `last_outcome`),
which is what the run's counts are made of."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from kb import locks
from kb.models import Document, Revision
from kb.services.base import Actor
from kb.services.documents import (
    document_create,
    document_delete,
    document_restore,
    document_update,
    revision_create,
)
from kb.uploads import AcceptedUpload, upload_accept
from sources.kinds.base import Item
from sources.models import Source, SourceItem, SyncRun
from textkit.reasons import Reason, reason

NEW, CHANGED, RESTORED, UNCHANGED = "new", "changed", "restored", "unchanged"
SKIPPED, FAILED, UNSUPPORTED, DELETED = "skipped", "failed", "unsupported", "deleted"
OUTCOMES = (NEW, CHANGED, RESTORED, UNCHANGED, SKIPPED, FAILED, UNSUPPORTED, DELETED)

# Why an item was left alone (the run's problems, `sources.sync.Tally.problem`).
PERSON_DELETED = reason(
    "sync.person_deleted",
    gettext_noop("deleted in Canon by a person; restore it to sync it again"),
)
PURGED = reason(
    "sync.purged",
    gettext_noop(
        "%(key)s was deleted and purged after the retention window; its key cannot be used again"
    ),
)
ALREADY_DELETED = reason(
    "sync.already_deleted",
    gettext_noop(
        "gone at the source; its document was already deleted in Canon by a person, "
        "so there was nothing to delete"
    ),
)


@dataclass(frozen=True)
class Outcome:
    """What the run did with an item, and why when it is worth saying: a declared reason (the
    admin words it in the person's language), plain English, or the exception that refused the
    item (its English, and its reason when it carries one)."""

    kind: str  # one of OUTCOMES
    reason: str | Reason | Exception = ""


def document_key(source: Source, path: str) -> str:
    return f"{source.slug}/{path}"


def item_accept(item: Item, data: bytes) -> AcceptedUpload:
    """The upload checks every file passes (size, emptiness, media type by name and bytes), then
    the bytes stored. Raises UploadRejected (a readable reason) or, with status 503, when the
    file store cannot be reached."""
    return upload_accept(SimpleUploadedFile(item.file_name, data))


def _lock_item(source: Source, path: str) -> SourceItem:
    row, _ = SourceItem.objects.get_or_create(source=source, path=path)
    return SourceItem.objects.select_for_update(no_key=True).get(pk=row.pk)


def _deleted_by_the_sync(row: SourceItem, document: Document) -> bool:
    """Whether the document's deletion is the one the sync made when the item left the source
    (and not a person's: before it, or after a person restored the document)."""
    return (
        row.gone_at is not None
        and row.sync_deleted_at is not None
        and row.sync_deleted_at == document.deleted_at
    )


def _refusal(row: SourceItem, document: Document | None) -> Outcome | None:
    """Why the item's document must not be touched by the sync, or None."""
    if document is None:
        return None
    if document.purged_at is not None:
        return Outcome(SKIPPED, PURGED(key=document.key))
    if document.deleted_at is not None and not _deleted_by_the_sync(row, document):
        return Outcome(SKIPPED, PERSON_DELETED())
    return None


def _record(row: SourceItem, run: SyncRun, kind: str) -> None:
    row.last_seen_run = run
    row.last_outcome = kind
    row.save(update_fields=["last_seen_run", "last_outcome", "updated_at"])


def item_held_back(*, run: SyncRun, item: Item) -> Outcome | None:
    """Before fetching: the outcome of an item whose document the sync must leave alone (a
    person deleted it; it was purged), recorded for the run, or None to go on. `item_submit`
    checks again under the lock. Runs in the caller's fenced transaction."""
    row = SourceItem.objects.filter(source=run.source, path=item.path).first()
    document = row.document if row is not None else None
    if row is None or _refusal(row, document) is None:
        return None
    row = _lock_item(run.source, item.path)
    refusal = _refusal(row, row.document)
    if refusal is not None:
        _record(row, run, refusal.kind)
    return refusal


def item_outcome_record(*, run: SyncRun, item: Item, outcome: Outcome) -> None:
    """Record what the run did with an item it took no revision from: failed (tried again next
    run: the version is not written) or unsupported (its version is written when no document
    stands behind it, so the next run counts it without a word). Runs in the caller's fenced
    transaction; idempotent."""
    row = _lock_item(run.source, item.path)
    if outcome.kind == UNSUPPORTED and row.document_id is None:
        row.version = item.version
        row.state = dict(item.state)
        row.save(update_fields=["version", "state", "updated_at"])
    _record(row, run, outcome.kind)


def item_submit(
    *,
    run: SyncRun,
    item: Item,
    accepted: AcceptedUpload,
    metadata: dict[str, Any],
) -> Outcome:
    """Make the item's bytes the desired revision of its document (creating, restoring or
    updating it). Caller runs this inside its fenced transaction (the run's lease).

    A document a person deleted stays deleted (skipped, said why) until a person restores it;
    one the sync deleted itself (the item had left the source) is restored. Content identical
    to the desired revision makes no revision (a touched file); mapped metadata is written over
    the fields the source maps and no others."""
    source = run.source
    row = _lock_item(source, item.path)
    if row.version == item.version and row.gone_at is None and row.document_id is not None:
        return Outcome(row.last_outcome or UNCHANGED)  # a duplicate or retried run already did it
    document = (
        row.document
        or Document.objects.filter(kb_id=source.kb_id, key=document_key(source, item.path)).first()
    )
    refusal = _refusal(row, document)
    if refusal is not None:
        _record(row, run, refusal.kind)
        return refusal
    outcome: Outcome
    if document is None:
        revision = document_create(
            kb=source.kb,
            key=document_key(source, item.path),
            title="",
            stored=accepted.stored,
            media_type=accepted.media_type,
            original_name=accepted.original_name,
            access_groups=source.access_groups,
            metadata=metadata,
        )
        document = revision.document
        outcome = Outcome(NEW)
    else:
        if document.deleted_at is not None:  # the sync's own deletion (`_refusal`)
            document_restore(document_id=document.pk, reason=f"back at the source {source.name}")
            outcome = Outcome(RESTORED)
        else:
            outcome = Outcome(CHANGED)
        desired = (
            Revision.objects.filter(document=document, number=document.desired_revision).first()
            if document.desired_revision is not None
            else None
        )
        if desired is None or desired.sha256 != accepted.stored.sha256:
            revision = revision_create(
                document=document,
                stored=accepted.stored,
                media_type=accepted.media_type,
                original_name=accepted.original_name,
            )
        else:
            revision = desired
            if outcome.kind == CHANGED:
                outcome = Outcome(UNCHANGED)  # touched, same bytes: no revision
        merged = {**document.metadata, **metadata}
        if merged != document.metadata:
            document_update(document=document, metadata=merged)
    row.document = document
    row.version = item.version
    row.sha256 = accepted.stored.sha256
    row.size = accepted.stored.size
    row.modified = item.modified
    row.state = dict(item.state)
    row.revision_number = revision.number
    row.last_seen_run = run
    row.last_outcome = outcome.kind
    row.gone_at = None
    row.sync_deleted_at = None
    row.pending_delete_run = None
    row.save()
    return outcome


def item_delete(*, run: SyncRun, item_id: int, actor: Actor = None) -> Outcome | None:
    """Soft-delete the document of an item that left the source (restorable for the retention
    window; the timeline says why): Outcome DELETED. When a person deleted the document
    already, the item is only marked gone and its document stays the person's to restore:
    Outcome SKIPPED, saying so. None, changing nothing, when the item is already gone or a
    later run saw it again. Runs in its own transaction, or the caller's. Lock order: the item
    row, then the document."""
    with transaction.atomic():
        row = SourceItem.objects.select_for_update(no_key=True).get(pk=item_id)
        if row.gone_at is not None or row.document_id is None:
            return None
        if row.last_seen_run_id is not None and row.last_seen_run_id > run.pk:
            return None
        document = locks.lock_document(row.document_id)
        row.gone_at = timezone.now()
        row.pending_delete_run = None
        row.last_seen_run = run
        if document.deleted_at is not None:
            row.last_outcome = SKIPPED
            row.save(
                update_fields=[
                    "gone_at",
                    "pending_delete_run",
                    "last_seen_run",
                    "last_outcome",
                    "updated_at",
                ]
            )
            return Outcome(SKIPPED, ALREADY_DELETED())
        document = document_delete(
            document_id=document.pk,
            actor=actor,
            reason=f"deleted by sync of {run.source.name}: gone at the source",
        )
        row.sync_deleted_at = document.deleted_at
        row.last_outcome = DELETED
        row.save(
            update_fields=[
                "gone_at",
                "sync_deleted_at",
                "pending_delete_run",
                "last_seen_run",
                "last_outcome",
                "updated_at",
            ]
        )
    return Outcome(DELETED)
