"""Writes of sources: create or change one (its configuration checked by its kind, its
credentials encrypted), pause and resume."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext_noop

from kb.metadata import field_specs
from kb.models import KnowledgeBase
from sources.kinds.base import ConfigInvalid
from sources.kinds.folder import FolderKind
from sources.kinds.registry import KINDS
from sources.models import Source
from sources.patterns import PatternInvalid, Patterns
from sources.secrets import credentials_decrypt, credentials_encrypt
from textkit.reasons import Reason, ReasonedError, reason

# Why a source cannot be saved, besides its kind's refusal of its settings (`ConfigInvalid`).
NO_SUCH_KIND = reason("source.no_such_kind", gettext_noop("There is no kind of source %(kind)s."))
NOT_A_FIELD = reason(
    "source.not_a_field",
    gettext_noop('"%(field)s" is not a metadata field of %(kb)s; declare it first.'),
)
NO_SUCH_CREDENTIAL = reason(
    "source.no_such_credential",
    gettext_noop("%(kind)s sources take no %(name)s."),
    words=("kind",),
)
THRESHOLD_RANGE = reason(
    "source.threshold_range", gettext_noop("Give a share between 1 and 100 %%.")
)
SLUG_TAKEN = reason("source.slug_taken", gettext_noop("%(kb)s already has a source %(slug)s."))
KIND_FIXED = reason(
    "source.kind_fixed", gettext_noop("A source's kind cannot change; add a new source.")
)
SLUG_FIXED = reason(
    "source.slug_fixed",
    gettext_noop(
        "The slug is the first part of this source's document keys; it cannot change once the "
        "source has documents."
    ),
)


class SourceInvalid(ReasonedError, ValueError):
    """A source that cannot be saved; `field` names what to fix, the message (a declared
    reason, which the admin words in the person's language) says how."""

    def __init__(self, field: str, message: str | Reason) -> None:
        super().__init__(message)
        self.field = field


def source_check(
    *,
    kb: KnowledgeBase,
    kind: str,
    config: Mapping[str, Any],
    include: Sequence[str],
    exclude: Sequence[str],
    metadata_map: Mapping[str, str],
    credentials: Mapping[str, str] | None,
) -> dict[str, Any]:
    """The configuration as it will be stored; SourceInvalid naming the field otherwise."""
    kind_class = KINDS.get(kind)
    if kind_class is None:
        raise SourceInvalid("kind", NO_SUCH_KIND(kind=repr(kind)))
    try:
        checked = kind_class.check_config(config, allow_private=settings.SOURCES_ALLOW_PRIVATE)
    except ConfigInvalid as exc:
        raise SourceInvalid("config", exc.why) from None
    if kind_class is FolderKind:
        refusal = FolderKind.root_refusal(checked["path"], settings.SOURCES_FOLDER_ROOTS)
        if refusal is not None:
            raise SourceInvalid("config", refusal)
    for name, patterns in (("include", include), ("exclude", exclude)):
        try:
            Patterns.of(patterns, ())
        except PatternInvalid as exc:
            raise SourceInvalid(name, exc.why) from None
    specs = field_specs(kb)
    for source_field, kb_field in metadata_map.items():
        spec = specs.get(kb_field)
        if not isinstance(source_field, str) or spec is None or spec.built_in:
            raise SourceInvalid("metadata_map", NOT_A_FIELD(field=kb_field, kb=str(kb)))
    unknown = sorted(set(credentials or {}) - set(kind_class.SECRET_FIELDS))
    if unknown:
        raise SourceInvalid(
            "credentials", NO_SUCH_CREDENTIAL(kind=kind_class.label, name=repr(unknown[0]))
        )
    return checked


def source_save(
    *,
    kb: KnowledgeBase,
    source: Source | None = None,
    name: str,
    slug: str,
    kind: str,
    config: Mapping[str, Any],
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    access_groups: Sequence[str] = (),
    metadata_map: Mapping[str, str] | None = None,
    sync_every_minutes: int | None = None,
    enabled: bool = True,
    delete_threshold_percent: int = 20,
    credentials: Mapping[str, str] | None = None,
) -> Source:
    """Create a source (`source` None) or change one. `credentials` None keeps the stored ones;
    a mapping replaces them (a key given "" is left as it was). The kind and, once the source
    has documents, the slug (their keys' first part) cannot change. Raises SourceInvalid."""
    metadata_map = dict(metadata_map or {})
    checked = source_check(
        kb=kb,
        kind=kind,
        config=config,
        include=include,
        exclude=exclude,
        metadata_map=metadata_map,
        credentials=credentials,
    )
    if not 1 <= delete_threshold_percent <= 100:
        raise SourceInvalid("delete_threshold_percent", THRESHOLD_RANGE())
    with transaction.atomic():
        if source is None:
            if Source.objects.filter(kb=kb, slug=slug).exists():
                raise SourceInvalid("slug", SLUG_TAKEN(kb=str(kb), slug=repr(slug)))
            source = Source(kb=kb, kind=kind)
        else:
            source = Source.objects.select_for_update(no_key=True).get(pk=source.pk)
            if kind != source.kind:
                raise SourceInvalid("kind", KIND_FIXED())
            if slug != source.slug and source.items.exists():
                raise SourceInvalid("slug", SLUG_FIXED())
        if credentials is not None:
            kept = credentials_decrypt(source.credentials_encrypted)
            kept.update({key: value for key, value in credentials.items() if value})
            source.credentials_encrypted = credentials_encrypt(kept)
        source.name = name
        source.slug = slug
        source.config = checked
        source.include = list(include)
        source.exclude = list(exclude)
        source.access_groups = sorted(set(access_groups))
        source.metadata_map = metadata_map
        source.sync_every_minutes = sync_every_minutes or None
        source.enabled = enabled
        source.delete_threshold_percent = delete_threshold_percent
        source.save()
    return source


def source_pause(*, source: Source, paused: bool) -> Source:
    """Pause (no run starts; a run under way stops at its next progress save, deleting
    nothing) or resume. Idempotent."""
    with transaction.atomic():
        locked = Source.objects.select_for_update(no_key=True).get(pk=source.pk)
        if locked.enabled == (not paused):
            return locked
        locked.enabled = not paused
        if not paused:
            locked.next_sync_at = None  # due at once if scheduled
        locked.save(update_fields=["enabled", "next_sync_at", "updated_at"])
    return locked
