"""A branch of a Git repository: every file in the tree of the branch's head commit is an item.

The kind keeps a bare repository in `limits.cache_dir` (dulwich, pure Python: no git binary).
The first run fetches what the branch reaches, and only that branch; later runs fetch the new
objects. The cache belongs to one source; one run at a time writes it (the run's lease), `fetch`
only reads it. A cache that cannot be read is deleted and fetched again once; a cache made for
another URL is replaced.

Paths are identity: a rename is a delete of the old path and an add of the new one. An item's
version is its blob id, so a file whose bytes a commit leaves alone stays unchanged, and a revert
is a change. Submodules and symbolic links are reported, not followed; a Git LFS file is the
pointer file Git holds.

Time: an item's `modified` and its metadata's "committed" are the time of the head commit the run
saw (with "commit", its id), not of the last commit that touched the file: finding that walks the
history with a tree diff per commit on every run, too dear for a repository with a long history.

Reach: an http(s) URL passes `url_check`, and every request, redirects included, `host_check`.
A local path (or file:// URL) reads the server's own disk, so it is accepted only when sources
may reach private addresses. Credentials (`username`, `password` or a token as the password) go
only in the Authorization header of requests to the URL's own origin, never in the URL or a
message."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta, timezone
from stat import S_ISLNK, S_ISREG
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import urllib3
import urllib3.poolmanager
from django.utils.translation import gettext_noop
from dulwich.client import (
    GitClient,
    HTTPUnauthorized,
    LocalGitClient,
    Urllib3HttpGitClient,
    default_urllib3_manager,
)
from dulwich.errors import GitProtocolError, NotGitRepository
from dulwich.object_store import MaxTreeDepthExceeded
from dulwich.objects import S_ISGITLINK, Blob, Commit, ObjectID
from dulwich.refs import Ref, check_ref_format
from dulwich.repo import Repo

from sources.kinds.base import (
    ITEM_LIMIT,
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
from sources.network import AddressRefused, host_check, peer_checked_pools, url_check
from textkit.reasons import reason

# Written into the cache when it is made: only a directory holding it is ever deleted.
MARKER = "canon-source-cache.json"
# Sent as the user name when only a token is given (GitHub's convention; GitLab takes any).
TOKEN_USERNAME = "x-access-token"  # noqa: S105 - a user name, not a secret
_SHA = re.compile(r"[0-9a-f]{40}")
_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")

# What a Git source says. `url` is the repository's address without user information, `path`
# an item's path (or a folder's on the server), `detail` a library's or the system's own words
# with any credential scrubbed out.
URL_NOT_TEXT = reason("git.url_not_text", gettext_noop("The repository's URL must be text."))
CREDENTIALS_IN_URL = reason(
    "git.credentials_in_url",
    gettext_noop("Put the user name and password (or token) in the credentials, not the URL."),
)
LOCAL_NEEDS_PRIVATE = reason(
    "git.local_needs_private",
    gettext_noop(
        "A local repository is read from the server's own disk; that is allowed only when "
        "CANON_SOURCES_ALLOW_PRIVATE is set."
    ),
)
FILE_URL_ELSEWHERE = reason(
    "git.file_url_elsewhere", gettext_noop("A file:// URL must name a path on this server.")
)
NOT_A_FOLDER = reason("git.not_a_folder", gettext_noop("%(path)s is not a folder on the server."))
NOT_WEB = reason("git.not_web", gettext_noop("The repository must be an https:// or http:// URL."))
BRANCH_NOT_TEXT = reason("git.branch_not_text", gettext_noop("The branch must be text."))
BAD_BRANCH = reason("git.bad_branch", gettext_noop("%(branch)s is not a valid branch name."))
COPY_DAMAGED = reason(
    "git.copy_damaged",
    gettext_noop("The local copy of the repository cannot be read (%(detail)s)."),
)
COPY_UNREADABLE = reason(
    "git.copy_unreadable", gettext_noop("The local copy cannot be read (%(detail)s).")
)
NO_BLOB_ID = reason("git.no_blob_id", gettext_noop("%(path)s has no Git blob id as its version."))
NOT_IN_BRANCH = reason("git.not_in_branch", gettext_noop("%(path)s is no longer in the branch."))
NOT_A_FILE = reason("git.not_a_file", gettext_noop("%(path)s is not a file in the repository."))
NO_CACHE = reason(
    "git.no_cache", gettext_noop("Git sources need a cache directory (SOURCES_CACHE_ROOT).")
)
CACHE_TAKEN = reason(
    "git.cache_taken",
    gettext_noop("The cache directory %(path)s holds something else; not used."),
)
CACHE_UNMAKABLE = reason(
    "git.cache_unmakable",
    gettext_noop("The cache directory %(path)s cannot be made: %(detail)s."),
)
CREDENTIALS_REFUSED = reason(
    "git.credentials_refused",
    gettext_noop("The repository refused the credentials (HTTP 401)."),
)
CREDENTIALS_NEEDED = reason(
    "git.credentials_needed",
    gettext_noop(
        "The repository asks for credentials (HTTP 401): give a user name and a password or token."
    ),
)
NOT_A_REPOSITORY = reason(
    "git.not_a_repository", gettext_noop("There is no Git repository at %(url)s.")
)
FETCH_FAILED = reason(
    "git.fetch_failed", gettext_noop("The repository cannot be fetched: %(detail)s.")
)
# `detail`: why its address is refused (`sources.network`), a sentence of its own.
FETCH_REFUSED = reason(
    "git.fetch_refused", gettext_noop("The repository cannot be fetched: %(detail)s")
)
NO_BRANCH = reason("git.no_branch", gettext_noop("The repository has no branch %(branch)s."))
NO_BRANCH_OF = reason(
    "git.no_branch_of",
    gettext_noop("The repository has no branch %(branch)s (its branches: %(branches)s)."),
)
NOT_A_COMMIT = reason("git.not_a_commit", gettext_noop("The branch does not point at a commit."))
LOCAL_NOT_ALLOWED = reason(
    "git.local_not_allowed",
    gettext_noop("A local repository is allowed only when CANON_SOURCES_ALLOW_PRIVATE is set."),
)
PATH_NOT_UTF8 = reason("git.path_not_utf8", gettext_noop("the path is not UTF-8"))
SUBMODULE = reason("git.submodule", gettext_noop("submodule, not followed"))
TOO_DEEP = reason(
    "git.too_deep", gettext_noop("The repository's folders nest too deep to be read.")
)


class _Corrupt(Exception):
    """The cache could not be read; the message says why."""


class GitKind(Kind):
    name = "git"
    label = "Git repository"
    CONFIG_FIELDS = ("url", "branch")
    REQUIRED_FIELDS = ("url",)
    SECRET_FIELDS = ("username", "password")
    _repo: Repo | None = None  # the cache, once opened

    @classmethod
    def check_config(cls, config: Mapping[str, Any], *, allow_private: bool) -> dict[str, Any]:
        """`url` is an http(s) URL without credentials in it, or (when `allow_private`) an
        absolute path or file:// URL of a repository on the server, stored as the path.
        `branch` defaults to "main" ("refs/heads/" in front is dropped)."""
        checked = super().check_config(config, allow_private=allow_private)
        url = checked["url"]
        if not isinstance(url, str):
            raise ConfigInvalid(URL_NOT_TEXT())
        url = url.strip()
        parts = urlsplit(url)
        if parts.scheme in ("http", "https"):
            if "@" in parts.netloc:
                raise ConfigInvalid(CREDENTIALS_IN_URL())
            try:
                url_check(url, allow_private=allow_private)
            except AddressRefused as exc:
                raise ConfigInvalid(exc.why) from None
        elif parts.scheme == "file" or (not parts.scheme and url.startswith("/")):
            if not allow_private:
                raise ConfigInvalid(LOCAL_NEEDS_PRIVATE())
            path = unquote(parts.path) if parts.scheme == "file" else url
            if parts.scheme == "file" and parts.netloc not in ("", "localhost"):
                raise ConfigInvalid(FILE_URL_ELSEWHERE())
            if not os.path.isabs(path) or not os.path.isdir(path):
                raise ConfigInvalid(NOT_A_FOLDER(path=path))
            url = os.path.normpath(path)
        else:
            raise ConfigInvalid(NOT_WEB())
        branch = checked.get("branch") or "main"
        if not isinstance(branch, str):
            raise ConfigInvalid(BRANCH_NOT_TEXT())
        branch = branch.strip().removeprefix("refs/heads/")
        if not check_ref_format(Ref(b"refs/heads/" + branch.encode())):
            raise ConfigInvalid(BAD_BRANCH(branch=repr(branch)))
        checked.update(url=url, branch=branch)
        return checked

    @property
    def url(self) -> str:
        return str(self.config["url"])

    @property
    def ref(self) -> Ref:
        return Ref(b"refs/heads/" + str(self.config.get("branch") or "main").encode())

    def listing(self, previous: Mapping[str, Mapping[str, Any]]) -> Iterator[Item | Problem]:
        """The branch head's files, depth first in tree order. Fetches first: ListingFailed
        when the repository cannot be reached, refuses the credentials or has no such branch.
        An entry of `previous` with the same version lends its size (no blob is read for an
        unchanged file). Items and problems together count towards `limits.max_items`."""
        for attempt in (1, 2):
            try:
                repo, head = self._update()
                entries = self._entries(repo, head, previous)
                break
            except _Corrupt as exc:
                self._cache_drop()
                if attempt == 2:
                    raise ListingFailed(COPY_DAMAGED(detail=str(exc))) from None
        yield from entries

    def fetch(self, item: Item) -> Fetched:
        """The blob `item.version` from the cache, fetching again once when it is missing (a
        run resumed elsewhere). ItemProblem when it is over the limit or no longer in the
        branch; SourceUnavailable when the repository or the cache cannot be read."""
        limit = self.limits.max_item_bytes
        if item.size is not None and item.size > limit:
            raise ItemProblem(ITEM_TOO_LARGE(path=item.path, size=item.size, limit=limit))
        if not _SHA.fullmatch(item.version):
            raise ItemProblem(NO_BLOB_ID(path=item.path))
        sha = ObjectID(item.version.encode())
        try:
            repo = self._cache()
            if sha not in repo.object_store:
                repo, _ = self._update()
            if sha not in repo.object_store:
                raise ItemProblem(NOT_IN_BRANCH(path=item.path))
            type_num, data = repo.object_store.get_raw(sha)
        except ItemProblem:
            raise
        except ListingFailed as exc:
            raise SourceUnavailable(exc.why) from None
        except Exception as exc:  # a broken pack or object: fetched again by the next run
            self._cache_drop()
            raise SourceUnavailable(COPY_UNREADABLE(detail=_why(exc))) from None
        if type_num != Blob.type_num:
            raise ItemProblem(NOT_A_FILE(path=item.path))
        if len(data) > limit:
            raise ItemProblem(ITEM_TOO_LARGE(path=item.path, size=len(data), limit=limit))
        metadata = item_front_matter(item, data)
        return Fetched(data=data, media_type="", metadata=metadata)

    def close(self) -> None:
        if self._repo is not None:
            self._repo.close()
            self._repo = None

    # The cache.

    def _cache(self) -> Repo:
        """The cache's repository, made when there is none. _Corrupt when it cannot be opened;
        ListingFailed when there is no cache directory, or a directory that is not Canon's."""
        if self._repo is not None:
            return self._repo
        root = self.limits.cache_dir
        if not root:
            raise ListingFailed(NO_CACHE())
        marker = os.path.join(root, MARKER)
        if os.path.isfile(marker):
            try:
                with open(marker, encoding="utf-8") as file:
                    made_for = json.load(file).get("url")
            except (OSError, ValueError, AttributeError) as exc:
                raise _Corrupt(_why(exc)) from None
            if made_for != self.url:
                self._cache_drop()
        if os.path.isfile(marker):
            try:
                self._repo = Repo(root, bare=True)
            except Exception as exc:  # dulwich raises several types for a damaged repository
                raise _Corrupt(_why(exc)) from None
            return self._repo
        try:
            if os.path.exists(root) and os.listdir(root):
                raise ListingFailed(CACHE_TAKEN(path=root))
            os.makedirs(root, exist_ok=True)
            repo = Repo.init_bare(root)
            with open(marker, "w", encoding="utf-8") as file:
                json.dump({"url": self.url}, file)
        except OSError as exc:
            raise ListingFailed(CACHE_UNMAKABLE(path=root, detail=_why(exc))) from None
        self._repo = repo
        return repo

    def _cache_drop(self) -> None:
        """Delete the cache (only a directory marked as one)."""
        self.close()
        root = self.limits.cache_dir
        if root and os.path.isfile(os.path.join(root, MARKER)):
            shutil.rmtree(root, ignore_errors=True)

    def _update(self) -> tuple[Repo, Commit]:
        """Fetch the branch into the cache; the cache and the branch's head commit."""
        repo = self._cache()
        ref = self.ref
        advertised: dict[Ref, ObjectID] = {}

        def wants(refs: Mapping[Ref, ObjectID], depth: int | None = None) -> list[ObjectID]:
            advertised.update((name, sha) for name, sha in refs.items() if sha)
            sha = refs.get(ref)
            return [sha] if sha and sha not in repo.object_store else []

        client, path = self._client()
        try:
            client.fetch(path, repo, determine_wants=wants, ref_prefix=[Ref(b"refs/heads/")])
        except HTTPUnauthorized:
            if self.credentials.get("password") or self.credentials.get("username"):
                raise ListingFailed(CREDENTIALS_REFUSED()) from None
            raise ListingFailed(CREDENTIALS_NEEDED()) from None
        except NotGitRepository:
            raise ListingFailed(NOT_A_REPOSITORY(url=_USERINFO.sub("", self.url))) from None
        except AddressRefused as exc:
            raise ListingFailed(FETCH_REFUSED(detail=exc.why)) from None
        except (GitProtocolError, OSError, urllib3.exceptions.HTTPError) as exc:
            raise ListingFailed(FETCH_FAILED(detail=self._scrub(_why(exc)))) from None
        except Exception as exc:  # writing the pack into a damaged cache
            raise _Corrupt(self._scrub(_why(exc))) from None
        finally:
            if isinstance(client, Urllib3HttpGitClient):
                client.pool_manager.clear()  # its connections; dulwich's close() keeps them
        head = advertised.get(ref)
        if head is None:
            branches = sorted(
                name.removeprefix(b"refs/heads/").decode("utf-8", "replace")
                for name in advertised
                if name.startswith(b"refs/heads/")
            )
            branch = repr(self.config.get("branch") or "main")
            if branches:
                raise ListingFailed(NO_BRANCH_OF(branch=branch, branches=", ".join(branches[:10])))
            raise ListingFailed(NO_BRANCH(branch=branch))
        try:
            commit = repo[head]
            repo.refs[ref] = head  # keeps the branch reachable in the cache
        except Exception as exc:
            raise _Corrupt(_why(exc)) from None
        if not isinstance(commit, Commit):
            raise ListingFailed(NOT_A_COMMIT())
        return repo, commit

    def _client(self) -> tuple[GitClient, str]:
        if not self.url.startswith(("http://", "https://")):
            if not self.limits.allow_private:
                raise ListingFailed(LOCAL_NOT_ALLOWED())
            return LocalGitClient(), self.url
        username = self.credentials.get("username") or None
        password = self.credentials.get("password") or None
        if password and not username:
            username = TOKEN_USERNAME
        manager = default_urllib3_manager(
            None,
            pool_manager_cls=_GuardedPoolManager,
            proxy_manager_cls=_GuardedProxyManager,
            base_url=self.url,
            timeout=self.limits.timeout,
        )
        cast(Any, manager).allow_private = self.limits.allow_private
        client = Urllib3HttpGitClient(
            self.url,
            pool_manager=manager,
            username=username,
            password=password,
            timeout=self.limits.timeout,
        )
        return client, urlsplit(self.url).path

    # The listing.

    def _entries(
        self, repo: Repo, head: Commit, previous: Mapping[str, Mapping[str, Any]]
    ) -> list[Item | Problem]:
        """Every admitted entry of the head's tree, read before any is yielded so that a damaged
        cache is found (and fetched again) before the listing says anything."""
        offset = timezone(timedelta(seconds=head.commit_timezone))
        committed = datetime.fromtimestamp(head.commit_time, offset)
        metadata = {"commit": head.id.decode(), "committed": committed.isoformat()}
        modified = committed.astimezone(UTC)
        limit = self.limits.max_item_bytes
        found: list[Item | Problem] = []
        try:
            for entry in repo.object_store.iter_tree_contents(head.tree):
                try:
                    path = entry.path.decode()
                except UnicodeDecodeError:
                    path = entry.path.decode("utf-8", "replace")
                    if self.patterns.admits(path):
                        found.append(Problem(path, PATH_NOT_UTF8()))
                    continue
                if not self.patterns.admits(path):
                    continue
                if len(found) >= self.limits.max_items:
                    found.append(
                        Problem(path, ITEM_LIMIT(limit=self.limits.max_items), incomplete=True)
                    )
                    break
                version = entry.sha.decode()
                if S_ISGITLINK(entry.mode):
                    found.append(Problem(path, SUBMODULE()))
                elif S_ISLNK(entry.mode):
                    found.append(Problem(path, SYMBOLIC_LINK()))
                elif not S_ISREG(entry.mode):
                    found.append(Problem(path, NOT_REGULAR()))
                else:
                    size = _size(repo, entry.sha, previous.get(path), version)
                    if size > limit:
                        found.append(Problem(path, LISTED_TOO_LARGE(size=size, limit=limit)))
                        continue
                    found.append(
                        Item(
                            path=path,
                            version=version,
                            size=size,
                            modified=modified,
                            metadata=metadata,
                            state={"size": size},
                        )
                    )
        except _Corrupt:
            raise
        except MaxTreeDepthExceeded:
            raise ListingFailed(TOO_DEEP()) from None
        except Exception as exc:  # a missing or damaged object in the cache
            raise _Corrupt(_why(exc)) from None
        return found

    def _scrub(self, message: str) -> str:
        """`message` without the credentials, in any of the forms a library may print them."""
        message = _USERINFO.sub("", message)
        username = self.credentials.get("username") or TOKEN_USERNAME
        password = self.credentials.get("password") or ""
        if password:
            pair = f"{username}:{password}"
            for secret in (pair, base64.b64encode(pair.encode()).decode(), password):
                message = message.replace(secret, "***")
        return message


def _size(repo: Repo, sha: ObjectID, before: Mapping[str, Any] | None, version: str) -> int:
    """The blob's size: the previous run's when the version is the same, else read."""
    if before and before.get("version") == version and isinstance(before.get("size"), int):
        return int(before["size"])
    type_num, data = repo.object_store.get_raw(sha)
    if type_num != Blob.type_num:
        raise _Corrupt(f"{version} is not a blob")
    return len(data)


# The pools of a manager that checks where each connection landed (DNS rebinding).
_CHECKED_POOLS = peer_checked_pools(
    http=urllib3.HTTPConnectionPool, https=urllib3.HTTPSConnectionPool
)


class _GuardedPoolManager(urllib3.PoolManager):
    """Checks the host of every request, redirects included (urllib3 follows them through
    `urlopen`), before connecting; and, unless private addresses are allowed, the address each
    new connection reached (a name may resolve elsewhere at the connect: DNS rebinding)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allow_private = False  # checked until told otherwise

    @property
    def allow_private(self) -> bool:
        return self._allow_private

    @allow_private.setter
    def allow_private(self, allowed: bool) -> None:
        self._allow_private = allowed
        self.pool_classes_by_scheme = (
            dict(urllib3.poolmanager.pool_classes_by_scheme) if allowed else dict(_CHECKED_POOLS)
        )

    def urlopen(  # type: ignore[override]
        self, method: str, url: str, redirect: bool = True, **kw: Any
    ) -> urllib3.BaseHTTPResponse:
        host_check(urlsplit(url).hostname or "", allow_private=self.allow_private)
        return super().urlopen(method, url, redirect=redirect, **kw)


class _GuardedProxyManager(urllib3.ProxyManager):
    """The same check when the environment names a proxy."""

    allow_private = False

    def urlopen(  # type: ignore[override]
        self, method: str, url: str, redirect: bool = True, **kw: Any
    ) -> urllib3.BaseHTTPResponse:
        host_check(urlsplit(url).hostname or "", allow_private=self.allow_private)
        return super().urlopen(method, url, redirect=redirect, **kw)


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, _Corrupt) or not text:
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
