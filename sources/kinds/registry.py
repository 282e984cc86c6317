"""The kinds of source, by name, and a source's kind made ready to run."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from sources.kinds.base import Kind, Limits
from sources.kinds.folder import FolderKind
from sources.kinds.git import GitKind
from sources.kinds.s3 import S3Kind
from sources.kinds.website import WebsiteKind
from sources.models import Source
from sources.patterns import Patterns
from sources.secrets import credentials_decrypt

KINDS: dict[str, type[Kind]] = {
    kind.name: kind for kind in (FolderKind, S3Kind, WebsiteKind, GitKind)
}


def limits_for(source: Source) -> Limits:
    return Limits(
        max_item_bytes=settings.SOURCES_MAX_ITEM_BYTES,
        max_items=settings.SOURCES_MAX_ITEMS,
        timeout=settings.SOURCES_TIMEOUT_SECONDS,
        allow_private=settings.SOURCES_ALLOW_PRIVATE,
        cache_dir=str(Path(settings.SOURCES_CACHE_ROOT) / f"source-{source.pk}"),
        folder_roots=tuple(settings.SOURCES_FOLDER_ROOTS),
    )


def kind_for(source: Source) -> Kind:
    """The source's kind with its configuration, decrypted credentials, patterns and limits.
    Raises SecretsUnavailable when its credentials cannot be decrypted."""
    return KINDS[source.kind](
        config=source.config,
        credentials=credentials_decrypt(source.credentials_encrypted),
        patterns=Patterns.of(source.include, source.exclude),
        limits=limits_for(source),
    )
