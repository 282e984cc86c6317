"""Writes of metadata: the fields a knowledge base declares, and documents' values of them.

Locking: a field change locks the knowledge base (`kb.locks`, first in the one lock order) and
then rewrites its documents' values in one statement; a document's metadata write takes the
knowledge base's row FOR SHARE before its document lock. So a value is always checked against
the fields as they are when it commits, and a field change never interleaves with one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connection, transaction

from kb import locks
from kb.audit_kinds import METADATA_SET
from kb.metadata import (
    MAX_FIELDS,
    MetadataInvalid,
    check_field_name,
    normalise_metadata,
    normalise_value,
    retype_misfit,
    undeclared_keys,
)
from kb.models import Document, KnowledgeBase, MetadataField
from kb.services.base import Actor, actor_id
from work.models import AuditEvent


def metadata_field_save(
    *, kb: KnowledgeBase, name: str, type: str, description: str = ""
) -> MetadataField:
    """Declare a field of `kb`, or change its type or description. Every document's value of
    it is normalised to the (new) type in the same transaction; when one does not fit, nothing
    changes and MetadataInvalid names the document. A knowledge base that had no fields keeps
    the keys its documents already hold only if they are declared before the first write that
    checks them. Idempotent."""
    check_field_name(name)
    if type not in MetadataField.Type.values:
        raise MetadataInvalid(
            name, f"Unknown type {type!r}; use one of {MetadataField.Type.values}."
        )
    with transaction.atomic():
        locks.lock_knowledge_base(kb.pk)
        field = MetadataField.objects.filter(kb=kb, name=name).first()
        if field is None and MetadataField.objects.filter(kb=kb).count() >= MAX_FIELDS:
            raise MetadataInvalid(name, f"A knowledge base declares at most {MAX_FIELDS} fields.")
        if field is None or field.type != type:
            _renormalise(kb, name, type)
        field, _ = MetadataField.objects.update_or_create(
            kb=kb, name=name, defaults={"type": type, "description": description}
        )
    return field


def _renormalise(kb: KnowledgeBase, name: str, kind: str) -> None:
    """Every document's value of `name` in the stored form of `kind`; refuses on the first
    that does not fit."""
    rows = (
        Document.objects.filter(kb=kb, metadata__has_key=name)
        .order_by("pk")
        .values_list("pk", "key", "metadata")
    )
    changed: list[Document] = []
    for pk, key, metadata in rows:
        try:
            value = normalise_value(kind, metadata[name], field=name)
        except MetadataInvalid as exc:
            raise retype_misfit(key=key, name=name, kind=kind, problem=exc) from exc
        if value != metadata[name]:
            changed.append(Document(pk=pk, metadata={**metadata, name: value}))
    Document.objects.bulk_update(changed, ["metadata"], batch_size=500)


def metadata_field_delete(*, kb: KnowledgeBase, name: str) -> int:
    """Remove a field and every document's value of it; returns how many documents held one.
    Idempotent."""
    with transaction.atomic():
        locks.lock_knowledge_base(kb.pk)
        MetadataField.objects.filter(kb=kb, name=name).delete()
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE kb_document SET metadata = metadata - %s"
                " WHERE kb_id = %s AND metadata ? %s",
                [name, kb.pk, name],
            )
            return cursor.rowcount


class UndeclaredKeys(MetadataInvalid):
    """The bulk edit's refusal: documents hold keys their knowledge base does not declare.
    `holders` maps each such document's key to those keys, in key order."""

    def __init__(self, kb: KnowledgeBase, holders: dict[str, list[str]]) -> None:
        named = "; ".join(f"{key} ({', '.join(names)})" for key, names in holders.items())
        count = len(holders)
        super().__init__(
            next(iter(holders.values()))[0],
            f"{count} document{'s' if count != 1 else ''} hold{'s' if count == 1 else ''} "
            f"keys {kb.name} does not declare: {named}. Leave "
            f"{'it' if count == 1 else 'them'} out, or drop those keys.",
        )
        self.holders = holders


def documents_metadata_set(
    *,
    kb: KnowledgeBase,
    document_ids: Iterable[int],
    values: Mapping[str, Any],
    drop_undeclared: bool = False,
    actor: Actor = None,
    reason: str = "",
) -> int:
    """Set the given fields (null removes one) on each document, leaving its other fields; the
    bulk edit of the admin's document list. Returns how many documents changed.

    A document's whole metadata is checked against the declared fields, so one holding keys
    the knowledge base does not declare (set before they were) cannot be written as it is:
    with `drop_undeclared` those keys are removed from it, otherwise the edit is refused
    (UndeclaredKeys, naming every such document). All or nothing: any refusal changes no
    document. Each changed document gets an audit event (`audit_kinds.METADATA_SET`: what
    changed, who, `reason`) that its History and the timeline show.

    Locks the knowledge base's row FOR SHARE, then each document in id order (`kb.locks`).
    Idempotent: documents that already hold the values change nothing and get no event."""
    with transaction.atomic():
        _share_fields(kb)
        fields = list(kb.metadata_fields.all())
        declared = {f.name for f in fields}
        holders: dict[str, list[str]] = {}
        changed = 0
        for document_id in sorted(set(document_ids)):
            document = locks.lock_document(document_id)
            if document.kb_id != kb.pk:
                continue
            before = dict(document.metadata)
            extra = undeclared_keys(before, declared)
            if extra and not drop_undeclared:
                holders[document.key] = extra
                continue
            kept = {k: v for k, v in before.items() if k not in extra}
            merged = {**kept, **values}
            stored = normalise_metadata(
                kb, {k: v for k, v in merged.items() if v is not None}, fields=fields
            )
            if stored == before:
                continue
            document.metadata = stored
            document.save(update_fields=["metadata", "updated_at"])
            AuditEvent.objects.create(
                kind=METADATA_SET,
                kb_id=kb.pk,
                subject_type="document",
                subject_id=document.pk,
                action=metadata_change_words(before, stored, dropped=extra),
                actor_id=actor_id(actor),
                details={"reason": reason} if reason else {},
            )
            changed += 1
        if holders:
            raise UndeclaredKeys(kb, dict(sorted(holders.items())))
    return changed


def metadata_change_words(
    before: Mapping[str, Any], after: Mapping[str, Any], *, dropped: Iterable[str] = ()
) -> str:
    """What a metadata write changed, for people, old values kept (the record of a dropped
    key): "legacy: v1 → removed (not declared); year: 2020 → 2024"."""
    dropped = set(dropped)
    words = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        after_words = "removed (not declared)" if name in dropped else _shown(new)
        if new is None and name not in dropped:
            after_words = "removed"
        words.append(f"{name}: {_shown(old)} → {after_words}")
    return "; ".join(words)


def _shown(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _share_fields(kb: KnowledgeBase) -> None:
    """Hold the knowledge base's row FOR SHARE: its fields cannot change until commit."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM kb_knowledgebase WHERE id = %s FOR SHARE", [kb.pk])


def checked_metadata(kb: KnowledgeBase, values: Mapping[str, Any] | None) -> dict[str, Any]:
    """`values` normalised for a new document of `kb`, inside the caller's transaction, with
    the fields held (FOR SHARE) until it commits."""
    _share_fields(kb)
    return normalise_metadata(kb, values or {})
