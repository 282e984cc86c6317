"""A folder on the server (often a mounted share): every regular file under it is an item.

The walk never follows a symbolic link (one is reported, not read), so a link cannot bring files
from elsewhere on the server into a knowledge base; `fetch` opens each path component with
O_NOFOLLOW from the root for the same reason, so a directory swapped for a link after the listing
is refused too. Hidden files and directories (a name starting with '.', such as `.git` or
`.DS_Store`) are skipped without a word. An item's version is its mtime (nanoseconds) and size."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pathspec
from django.utils.translation import gettext_noop

from sources.kinds.base import (
    ITEM_GONE,
    ITEM_LIMIT,
    ITEM_OVER_LIMIT,
    ITEM_TOO_LARGE,
    LISTED_TOO_LARGE,
    NOT_REGULAR,
    SYMBOLIC_LINK,
    ConfigInvalid,
    Fetched,
    Item,
    ItemProblem,
    Kind,
    ListingFailed,
    Problem,
    SourceUnavailable,
)
from sources.kinds.front_matter import item_front_matter
from textkit.reasons import Reason, reason

# What a folder source says (`path`: the folder's path on the server, or an item's in it; `why`:
# the system's own words for an OS error, as it wrote them).
NOT_ABSOLUTE = reason(
    "folder.not_absolute", gettext_noop("The folder %(path)s is not an absolute path.")
)
MISSING = reason(
    "folder.missing", gettext_noop("The folder %(path)s does not exist on the server.")
)
NOT_A_FOLDER = reason("folder.not_a_folder", gettext_noop("%(path)s is not a folder."))
NO_ROOTS = reason(
    "folder.no_roots",
    gettext_noop(
        "Folder sources are not enabled on this server: an operator lists the folders they may "
        "read in CANON_SOURCES_FOLDER_ROOTS."
    ),
)
NOT_UNDER_ROOTS = reason(
    "folder.not_under_roots",
    gettext_noop("The folder %(path)s is not under a folder opened to sources (%(roots)s)."),
)
UNREADABLE = reason(
    "folder.unreadable", gettext_noop("The folder %(path)s cannot be read: %(why)s.")
)
SUBFOLDER_UNREADABLE = reason(
    "folder.subfolder_unreadable", gettext_noop("folder cannot be read: %(why)s")
)
FILE_UNREADABLE = reason("folder.file_unreadable", gettext_noop("cannot be read: %(why)s"))
NOT_INSIDE = reason("folder.not_inside", gettext_noop("%(path)s is not a path inside the folder."))
PASSES_LINK = reason(
    "folder.passes_link", gettext_noop("%(path)s is or passes a symbolic link, not followed.")
)
ITEM_NOT_REGULAR = reason(
    "folder.item_not_regular", gettext_noop("%(path)s is not a regular file.")
)
ITEM_UNREADABLE = reason(
    "folder.item_unreadable", gettext_noop("%(path)s cannot be read: %(why)s.")
)


class FolderKind(Kind):
    name = "folder"
    label = "folder"
    CONFIG_FIELDS = ("path",)
    REQUIRED_FIELDS = ("path",)

    @classmethod
    def check_config(cls, config: Mapping[str, Any], *, allow_private: bool) -> dict[str, Any]:
        """`path` must be an absolute path to a directory this process can see."""
        checked = super().check_config(config, allow_private=allow_private)
        path = checked["path"]
        if not isinstance(path, str) or not os.path.isabs(path):
            raise ConfigInvalid(NOT_ABSOLUTE(path=repr(path)))
        if not os.path.exists(path):
            raise ConfigInvalid(MISSING(path=path))
        if not os.path.isdir(path):
            raise ConfigInvalid(NOT_A_FOLDER(path=path))
        checked["path"] = os.path.normpath(path)
        return checked

    @property
    def root(self) -> str:
        return str(self.config["path"])

    @staticmethod
    def root_refusal(path: str, roots: Sequence[str]) -> Reason | None:
        """Why `path` may not be read (None when it may): it must resolve (links followed) to a
        folder under one of `roots`, the folders an operator opened to sources."""
        if not roots:
            return NO_ROOTS()
        real = os.path.realpath(path)
        for root in roots:
            base = os.path.realpath(root)
            if real == base or real.startswith(base.rstrip(os.sep) + os.sep):
                return None
        return NOT_UNDER_ROOTS(path=path, roots=", ".join(roots))

    def listing(self, previous: Mapping[str, Mapping[str, Any]]) -> Iterator[Item | Problem]:
        """Files in path order (deterministic), depth first, without recursion. Raises
        ListingFailed when the root itself cannot be read (an unmounted share); an unreadable
        directory below it is a Problem(incomplete=True). Items and per-file problems together
        count towards `limits.max_items`."""
        refusal = self.root_refusal(self.root, self.limits.folder_roots)
        if refusal is not None:
            raise ListingFailed(refusal)
        try:
            top = _entries(self.root)
        except OSError as exc:
            raise ListingFailed(UNREADABLE(path=self.root, why=_why(exc))) from None
        prune = _pruner(self.patterns.exclude)
        stack: list[tuple[str, Iterator[os.DirEntry[str]]]] = [("", iter(top))]
        listed = 0
        while stack:
            prefix, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                continue
            if entry.name.startswith("."):
                continue
            path = prefix + entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if prune(path):
                        continue
                    try:
                        children = _entries(entry.path)
                    except OSError as exc:
                        yield Problem(path, SUBFOLDER_UNREADABLE(why=_why(exc)), incomplete=True)
                        continue
                    stack.append((path + "/", iter(children)))
                    continue
                if not self.patterns.admits(path):
                    continue
                found = self._listed(entry, path)
            except FileNotFoundError:
                continue  # removed while we walked: it is not there now
            except OSError as exc:
                found = Problem(path, FILE_UNREADABLE(why=_why(exc)))
            listed += 1
            if listed > self.limits.max_items:
                yield Problem(path, ITEM_LIMIT(limit=self.limits.max_items), incomplete=True)
                return
            yield found

    def _listed(self, entry: os.DirEntry[str], path: str) -> Item | Problem:
        if entry.is_symlink():
            return Problem(path, SYMBOLIC_LINK())
        if not entry.is_file(follow_symlinks=False):
            return Problem(path, NOT_REGULAR())
        st = entry.stat(follow_symlinks=False)
        if st.st_size > self.limits.max_item_bytes:
            return Problem(
                path, LISTED_TOO_LARGE(size=st.st_size, limit=self.limits.max_item_bytes)
            )
        return Item(
            path=path,
            version=f"{st.st_mtime_ns}-{st.st_size}",
            size=st.st_size,
            modified=datetime.fromtimestamp(st.st_mtime_ns / 1e9, tz=UTC),
        )

    def fetch(self, item: Item) -> Fetched:
        """The file's bytes, read through descriptors opened with O_NOFOLLOW from the root.
        ItemProblem when it is gone, a link, not a file, or over the limit; SourceUnavailable
        when the root itself cannot be opened."""
        parts = item.path.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise ItemProblem(NOT_INSIDE(path=item.path))
        try:
            directory = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise SourceUnavailable(UNREADABLE(path=self.root, why=_why(exc))) from None
        try:
            data = self._read(directory, parts, item.path)
        finally:
            os.close(directory)
        metadata = item_front_matter(item, data)
        return Fetched(data=data, media_type="", metadata=metadata)

    def _read(self, directory: int, parts: list[str], path: str) -> bytes:
        """Walks `parts` from `directory` (which the caller closes)."""
        fd = -1
        opened: list[int] = []
        try:
            at = directory
            for index, part in enumerate(parts):
                last = index == len(parts) - 1
                # O_NONBLOCK: a FIFO put in a file's place must not hang the run
                flags = os.O_RDONLY | os.O_NOFOLLOW
                flags |= os.O_NONBLOCK if last else os.O_DIRECTORY
                try:
                    fd = os.open(part, flags, dir_fd=at)
                except OSError as exc:
                    # O_NOFOLLOW says ELOOP for a link, or ENOTDIR with O_DIRECTORY
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, at):
                        raise ItemProblem(PASSES_LINK(path=path)) from None
                    raise
                opened.append(fd)
                at = fd
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ItemProblem(ITEM_NOT_REGULAR(path=path))
            limit = self.limits.max_item_bytes
            if st.st_size > limit:
                raise ItemProblem(ITEM_TOO_LARGE(path=path, size=st.st_size, limit=limit))
            data = _read_at_most(fd, limit + 1)
            if len(data) > limit:  # it grew since the fstat
                raise ItemProblem(ITEM_OVER_LIMIT(path=path, limit=limit))
            return data
        except FileNotFoundError:
            raise ItemProblem(ITEM_GONE(path=path)) from None
        except OSError as exc:
            if exc.errno == errno.ENOTDIR:  # a folder on its way became a file
                raise ItemProblem(ITEM_GONE(path=path)) from None
            raise ItemProblem(ITEM_UNREADABLE(path=path, why=_why(exc))) from None
        finally:
            for opened_fd in opened:
                os.close(opened_fd)


def _entries(path: str) -> list[os.DirEntry[str]]:
    """A directory's entries in the order that makes the walk's paths sorted: a directory
    sorts as its name followed by '/', as its files' paths will."""
    with os.scandir(path) as scan:
        entries = list(scan)

    def order(entry: os.DirEntry[str]) -> str:
        try:
            return entry.name + "/" if entry.is_dir(follow_symlinks=False) else entry.name
        except OSError:
            return entry.name

    return sorted(entries, key=order)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _read_at_most(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _pruner(exclude: tuple[str, ...]) -> Callable[[str], bool]:
    """Whether a directory can be skipped whole: an exclude pattern matches the directory
    itself. Only when no exclude pattern is a negation: pathspec (unlike git) lets `!d/keep.md`
    take back a file under an excluded `d/`, and `Patterns.admits` follows pathspec."""
    if not exclude or any(line.lstrip().startswith("!") for line in exclude):
        return lambda path: False
    spec = pathspec.GitIgnoreSpec.from_lines(exclude)
    return lambda path: spec.match_file(path + "/")


def _why(exc: OSError) -> str:
    return (exc.strerror or type(exc).__name__).lower()
