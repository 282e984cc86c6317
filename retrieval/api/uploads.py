"""Writes through the API: uploads with an Idempotency-Key, and soft deletes.

An upload stores its bytes first (content-addressed, outside any transaction), then writes the
document or revision, its builds, tasks and outbox events (kb.services) and the idempotency
record in ONE transaction: a record exists if and only if its upload happened.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction
from django.utils import timezone

from kb.access import access_groups_clearing_refused
from kb.metadata import normalise_metadata
from kb.models import Document, KnowledgeBase, Revision
from kb.services.base import Actor, InvalidUpload
from kb.services.documents import document_create, document_delete, document_update, revision_create
from kb.uploads import AcceptedUpload, UploadRejected, upload_accept
from retrieval.documents import document_for
from retrieval.models import IdempotencyRecord
from retrieval.principals import Principal


class Refused(Exception):
    """A write refused before anything was committed; `status` is the HTTP status to answer,
    `retry_after` the seconds a client waits before trying again (a 503), else None."""

    def __init__(
        self, status: int, code: str, message: str, *, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


@dataclass(frozen=True)
class UploadResult:
    status: int
    body: dict[str, Any]
    replayed: bool


def _file_digest(upload: UploadedFile) -> str:
    digest = hashlib.sha256()
    upload.seek(0)
    for chunk in upload.chunks():
        digest.update(chunk)
    upload.seek(0)
    return digest.hexdigest()


def _request_sha256(
    *,
    kb: KnowledgeBase,
    key: str,
    title: str | None,
    access_groups: Sequence[str] | None,
    file_sha256: str,
    file_size: int,
    metadata: Mapping[str, Any] | None = None,
) -> str:
    canonical: dict[str, Any] = {
        "kb": kb.pk,
        "key": key,
        "title": title,
        "access_groups": sorted(set(access_groups)) if access_groups is not None else None,
        "file_sha256": file_sha256,
        "file_size": file_size,
    }
    if metadata is not None:  # left out when not given: earlier records keep their hash
        canonical["metadata"] = metadata
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()


def _replay(
    *, principal: Principal, idempotency_key: str, request_sha256: str
) -> UploadResult | None:
    """The stored answer to this principal's earlier request with this Idempotency-Key, if any.
    Records are per principal: another principal's record with the same key is never read."""
    record = IdempotencyRecord.objects.filter(
        tenant_id=principal.tenant_id, principal=principal.ident, key=idempotency_key
    ).first()
    if record is None:
        return None
    if record.request_sha256 != request_sha256:
        raise Refused(
            409,
            "idempotency_key_reused",
            "This Idempotency-Key was already used for a different request; use a new key.",
        )
    return UploadResult(status=record.response_status, body=record.response_body, replayed=True)


# What a client told the file store is down waits before trying again (Retry-After).
STORE_RETRY_SECONDS = 5


def _accept(upload: UploadedFile) -> AcceptedUpload:
    """The upload checks and storage of kb.uploads, refusals mapped to their HTTP status."""
    try:
        return upload_accept(upload)
    except UploadRejected as exc:
        retry_after = STORE_RETRY_SECONDS if exc.status == 503 else None
        raise Refused(exc.status, exc.code, str(exc), retry_after=retry_after) from exc


def _groups_assignable(principal: Principal, groups: Sequence[str]) -> None:
    """A caller may only put a document behind groups it holds itself, so it never writes what
    it could not read back."""
    foreign = sorted(set(groups) - principal.access_groups)
    if foreign and not principal.all_groups:
        raise Refused(
            403,
            "permission_denied",
            f"You may only assign access groups you hold; not: {', '.join(foreign)}.",
        )


def key_unavailable(key: str) -> Refused:
    """The one answer for a key the caller may not write, whatever the reason: the document
    that holds it is restricted to access groups the caller does not hold, or it is deleted.
    A key is unique in its knowledge base, so a caller who may upload can always learn that a
    key is taken (by trying it); this answer tells nothing more — not which reason, not the
    document's id, title, groups or state (README, "Search API")."""
    return Refused(
        409,
        "key_unavailable",
        f"The key {key!r} is taken by a document you cannot write (restricted to access groups "
        "you do not hold, or deleted and to be restored in the admin first). Use another key.",
    )


def _upload_authorize(
    *,
    principal: Principal,
    kb: KnowledgeBase,
    key: str,
    access_groups: Sequence[str] | None,
) -> Document | None:
    """The permission checks of an upload, run alike for a fresh request and before a replay,
    always in the same order so that no refusal depends on what the caller may not read: may
    it upload at all, may it assign these groups, may it read the document that holds `key`.
    Returns that document (None: the key is free). The knowledge base was checked by the view
    (`retrieval.search.visibility.knowledge_base_for`)."""
    if not principal.can_upload:
        raise Refused(403, "permission_denied", "You may not upload documents.")
    if access_groups is not None:
        _groups_assignable(principal, access_groups)
    document = Document.objects.filter(kb=kb, key=key).first()
    if document is not None and not principal.may_read_groups(document.access_groups):
        raise key_unavailable(key)
    if document is not None and access_groups is not None:
        refused = access_groups_clearing_refused(
            before=document.access_groups,
            after=access_groups,
            access_groups=principal.access_groups,
            all_groups=principal.all_groups,
        )
        if refused:
            raise Refused(403, "permission_denied", refused)
    return document


def upload_response_body(*, revision: Revision, document_created: bool) -> dict[str, Any]:
    document = revision.document
    return {
        "document_id": document.pk,
        "key": document.key,
        "title": document.title,
        "access_groups": list(document.access_groups),
        "revision": revision.number,
        "document_created": document_created,
        "build_ids": sorted(revision.builds.values_list("pk", flat=True)),
        "metadata": document.metadata,
    }


def _upload_apply(
    *,
    principal: Principal,
    kb: KnowledgeBase,
    key: str,
    title: str | None,
    access_groups: Sequence[str] | None,
    accepted: AcceptedUpload,
    actor: Actor,
    metadata: Mapping[str, Any] | None = None,
) -> tuple[int, dict[str, Any]]:
    """The writes of one upload; runs inside the caller's transaction."""
    document = _upload_authorize(principal=principal, kb=kb, key=key, access_groups=access_groups)
    if document is None:
        revision = document_create(
            kb=kb,
            key=key,
            title=title or key,
            stored=accepted.stored,
            media_type=accepted.media_type,
            original_name=accepted.original_name,
            access_groups=access_groups or (),
            metadata=metadata,
            actor=actor,
        )
        return 201, upload_response_body(revision=revision, document_created=True)
    if document.deleted_at is not None:
        raise key_unavailable(key)
    if title is not None or access_groups is not None or metadata is not None:
        document_update(
            document=document,
            title=title if title is not None else document.title,
            access_groups=access_groups if access_groups is not None else document.access_groups,
            metadata=metadata,  # given: replaces the document's metadata; None keeps it
        )
    try:
        revision = revision_create(
            document=document,
            stored=accepted.stored,
            media_type=accepted.media_type,
            original_name=accepted.original_name,
            actor=actor,
        )
    except InvalidUpload as exc:  # deleted since it was read (revision_create holds its lock)
        raise key_unavailable(key) from exc
    return 201, upload_response_body(revision=revision, document_created=False)


class _KeyTaken(Exception):
    """A concurrent upload created the document with this key first."""


def document_upload(
    *,
    principal: Principal,
    kb: KnowledgeBase,
    idempotency_key: str,
    key: str,
    upload: UploadedFile,
    title: str | None = None,
    access_groups: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    actor: Actor = None,
) -> UploadResult:
    """A new document, or a new revision when `key` exists in `kb` (its title, access groups
    and metadata are updated when given; metadata as a whole). Raises
    `kb.metadata.MetadataInvalid` (nothing stored) when `metadata` does not fit the knowledge
    base's fields; checked before the file is stored, and again under the service's lock.

    Idempotent per (tenant, principal, Idempotency-Key): a repeat of the same request by the
    same API key (or session user) returns the first result, the same key with a different
    request raises Refused (409). The Idempotency-Key namespace is the principal's own: another
    principal sending the same key makes a request of its own, checked and recorded as such.
    A replay answers only after the checks a fresh request passes (`_upload_authorize`, now),
    so a principal that lost a group or the knowledge base is refused as a fresh request would
    be. Concurrent repeats are serialized by the record's unique key. Refusals (4xx) are not
    recorded, so a corrected request may reuse its key.
    """
    _upload_authorize(principal=principal, kb=kb, key=key, access_groups=access_groups)
    request_sha = _request_sha256(
        kb=kb,
        key=key,
        title=title,
        access_groups=access_groups,
        file_sha256=_file_digest(upload),
        file_size=upload.size or 0,
        metadata=metadata,
    )
    replay = _replay(
        principal=principal, idempotency_key=idempotency_key, request_sha256=request_sha
    )
    if replay is not None:
        return replay
    if metadata is not None:
        normalise_metadata(kb, metadata)  # a misfit refused before the file is stored
    accepted = _accept(upload)  # stored before the transaction: a crash leaves an orphan only
    for attempt in range(2):
        try:
            with transaction.atomic():
                record = IdempotencyRecord.objects.create(
                    tenant_id=principal.tenant_id,
                    principal=principal.ident,
                    key=idempotency_key,
                    request_sha256=request_sha,
                    response_status=0,
                )
                try:
                    status, body = _upload_apply(
                        principal=principal,
                        kb=kb,
                        key=key,
                        title=title,
                        access_groups=access_groups,
                        accepted=accepted,
                        actor=actor,
                        metadata=metadata,
                    )
                except InvalidUpload as exc:  # document_create: the key was taken meanwhile
                    raise _KeyTaken() from exc
                record.response_status, record.response_body = status, body
                record.save(update_fields=["response_status", "response_body"])
            return UploadResult(status=status, body=body, replayed=False)
        except (IntegrityError, _KeyTaken):
            # A concurrent request with this Idempotency-Key committed first (replay it), or
            # one with another key created this document first (try again as a revision).
            replay = _replay(
                principal=principal, idempotency_key=idempotency_key, request_sha256=request_sha
            )
            if replay is not None:
                return replay
            if attempt:
                raise
    raise AssertionError("unreachable")  # the second attempt returned or raised


def document_soft_delete(*, principal: Principal, document_id: int, actor: Actor = None) -> None:
    """Soft delete a document the principal may read (invisible to search at commit).
    Idempotent. Raises OutOfScope (never telling another tenant's document apart) or
    Refused (403) when the principal may not delete."""
    document = document_for(principal=principal, document_id=document_id)
    if not principal.can_delete:
        raise Refused(403, "permission_denied", "You may not delete documents.")
    by = f"key {principal.api_key_id}" if principal.api_key_id else f"user {principal.user_id}"
    document_delete(document_id=document.pk, actor=actor, reason=f"API delete ({by})")


def idempotency_records_expire() -> int:
    """Delete upload idempotency records older than IDEMPOTENCY_RETENTION_HOURS; return how many.

    A key is honoured for at least that long: a repeat after its record is gone is a new
    upload. Idempotent; one statement, no locks beyond the rows it deletes.
    """
    cutoff = timezone.now() - timedelta(hours=settings.IDEMPOTENCY_RETENTION_HOURS)
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted
