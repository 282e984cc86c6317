"""What every kind of source answers with, and the errors it raises.

A kind is constructed from its source's configuration (`config`, plain JSON), its credentials
(`credentials`, decrypted, never logged) and `Limits`. `listing(previous)` yields an `Item` per
thing the source holds now and a `Problem` per thing it could not list; `fetch(item)` returns an
item's bytes. `previous` maps each path the last complete run saw to the `state` the kind kept for
it (an ETag, a page's links), so a kind can ask "changed since?" instead of reading everything.

Errors:
- `ListingFailed`: the source could not be listed at all, or stopped part-way (auth refused, the
  bucket is gone, a timeout). What was yielded before it is still true; nothing is deleted.
- `Problem`: a thing the source holds but Canon cannot take now (too large, unreadable, refused
  by robots.txt). Its path counts as present: its document is neither changed nor deleted.
- `Problem(incomplete=True)`: this part of the listing may be missing items (a 5xx on a page whose
  links were not read, a page limit reached); the run goes on but deletes nothing.
- `ItemProblem` from `fetch`: this item cannot be read now (too large, refused type, gone since
  the listing); it is counted as failed, its document keeps serving what it served.
- `SourceUnavailable` from `fetch`: the source itself stopped answering; the run stops and is
  retried later, having changed only what it finished.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from django.utils.translation import gettext_noop

from sources.patterns import Patterns
from textkit.reasons import Reason, ReasonedError, reason

# What every kind may say (a kind's own reasons are declared in its module). A `path` is the
# item's path in the source, `size` and `limit` counts of bytes; `kind` is the kind's label.
NO_SUCH_SETTING = reason(
    "source.no_such_setting",
    gettext_noop("%(kind)s sources have no setting %(name)s."),
    words=("kind",),
)
SETTING_REQUIRED = reason(
    "source.setting_required", gettext_noop("A %(kind)s source needs %(name)s."), words=("kind",)
)
ITEM_LIMIT = reason(
    "source.item_limit", gettext_noop("item limit %(limit)s reached; the rest was not listed")
)
SYMBOLIC_LINK = reason("source.symbolic_link", gettext_noop("symbolic link, not followed"))
NOT_REGULAR = reason("source.not_regular", gettext_noop("not a regular file"))
LISTED_TOO_LARGE = reason(
    "source.listed_too_large", gettext_noop("%(size)s bytes, over the limit of %(limit)s bytes")
)
ITEM_TOO_LARGE = reason(
    "source.item_too_large",
    gettext_noop("%(path)s is %(size)s bytes, over the limit of %(limit)s bytes."),
)
ITEM_OVER_LIMIT = reason(
    "source.item_over_limit", gettext_noop("%(path)s is over the limit of %(limit)s bytes.")
)
ITEM_GONE = reason("source.item_gone", gettext_noop("%(path)s is gone since it was listed."))


@dataclass(frozen=True)
class Limits:
    """Bounds every kind keeps. `allow_private` lets a source reach loopback, link-local and private
    addresses (`sources.network`); off unless the setting says so."""

    max_item_bytes: int
    max_items: int
    timeout: float = 30.0
    allow_private: bool = False
    # A directory the kind may keep between runs (a Git clone), one per source; "" for none.
    cache_dir: str = ""
    # The server folders a folder source may read (CANON_SOURCES_FOLDER_ROOTS): none by default,
    # so a source can never be pointed at the server's own files.
    folder_roots: tuple[str, ...] = ()


@dataclass(frozen=True)
class Item:
    """One thing a source holds now.

    `path` is '/'-separated and relative to the source: the document's key is the source's slug
    and this path. `version` changes whenever the content may have changed (an ETag, a Git blob
    id, mtime and size); an unchanged version is never fetched again. `state` is what the kind
    wants back in `previous` next time. `content` is set when listing had to read the bytes
    anyway (a crawled page), so `fetch` is not called for it."""

    path: str
    version: str
    size: int | None = None
    modified: datetime | None = None
    name: str = ""
    media_type: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    state: Mapping[str, Any] = field(default_factory=dict)
    content: bytes | None = None

    @property
    def file_name(self) -> str:
        return self.name or self.path.rsplit("/", 1)[-1] or "index"


@dataclass(frozen=True, init=False)
class Problem:
    """A thing the listing saw but could not list as an item, and why (for the run's report).
    `incomplete`: the listing may be missing items because of it, so the run deletes nothing.
    Why is given as a declared reason (or plain English): `reason` is its English (the API's
    words), `declared` the reason the admin words in the person's language (None for English)."""

    path: str
    reason: str
    incomplete: bool = False
    declared: Reason | None = field(default=None, compare=False)

    def __init__(self, path: str, reason: str | Reason, incomplete: bool = False) -> None:
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "reason", str(reason))
        object.__setattr__(self, "incomplete", incomplete)
        object.__setattr__(self, "declared", reason if isinstance(reason, Reason) else None)


@dataclass(frozen=True)
class Fetched:
    """An item's bytes, with what the source said of them: a media type (a hint, checked
    against the bytes like any upload) and metadata found in or beside the content."""

    data: bytes
    media_type: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)


class SourceError(ReasonedError):
    """Base of the errors a kind raises; the message is for a person and never holds a
    credential. It is a declared reason (`textkit.reasons`, declared below and in each kind's
    module), which the admin words in the person's language; `str(error)` is its English."""


class ListingFailed(SourceError):
    pass


class ItemProblem(SourceError):
    pass


class SourceUnavailable(SourceError):
    pass


class ConfigInvalid(SourceError):
    """The source's configuration cannot work (a missing bucket name, a path that is not a
    folder); raised by `check_config`, shown on the form or as the API's 400."""


class Kind(ABC):
    """A kind of source. Subclasses set `name`, `label`, `CONFIG_FIELDS` and `SECRET_FIELDS`
    (what the admin and API accept), and implement `listing` and `fetch`."""

    name: ClassVar[str]
    label: ClassVar[str]
    # Configuration keys this kind reads, and which of them are required.
    CONFIG_FIELDS: ClassVar[tuple[str, ...]] = ()
    REQUIRED_FIELDS: ClassVar[tuple[str, ...]] = ()
    # What a configuration key means, where its name does not say (the admin's help text).
    CONFIG_HELP: ClassVar[dict[str, str]] = {}
    # Credential keys (stored encrypted, never shown again).
    SECRET_FIELDS: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        *,
        config: Mapping[str, Any],
        credentials: Mapping[str, str],
        patterns: Patterns,
        limits: Limits,
    ) -> None:
        self.config = dict(config)
        self.credentials = dict(credentials)
        self.patterns = patterns
        self.limits = limits

    @classmethod
    def check_config(cls, config: Mapping[str, Any], *, allow_private: bool) -> dict[str, Any]:
        """The configuration as stored: unknown keys refused, required ones present. Kinds add
        their own checks (and call this). Raises ConfigInvalid naming the field."""
        unknown = sorted(set(config) - set(cls.CONFIG_FIELDS))
        if unknown:
            raise ConfigInvalid(NO_SUCH_SETTING(kind=cls.label, name=repr(unknown[0])))
        for name in cls.REQUIRED_FIELDS:
            if config.get(name) in (None, ""):
                raise ConfigInvalid(SETTING_REQUIRED(kind=cls.label, name=repr(name)))
        return dict(config)

    @abstractmethod
    def listing(self, previous: Mapping[str, Mapping[str, Any]]) -> Iterator[Item | Problem]:
        """Every item the source holds now that the patterns admit (and problems)."""

    @abstractmethod
    def fetch(self, item: Item) -> Fetched:
        """The item's bytes, at most `limits.max_item_bytes` (ItemProblem beyond)."""

    def close(self) -> None:  # noqa: B027 - most kinds hold nothing
        """Release what the kind holds (clients, a checkout's lock)."""
