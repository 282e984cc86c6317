"""The Git kind against real repositories built with dulwich in the test's directory: fetched from
the disk, and over HTTP from dulwich's own smart-HTTP server (with and without basic auth)."""

from __future__ import annotations

import base64
import ipaddress
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast
from wsgiref.simple_server import make_server

import pytest
from dulwich import porcelain
from dulwich.objects import Blob, Commit, ObjectID, Tree
from dulwich.refs import Ref
from dulwich.repo import Repo
from dulwich.server import BackendRepo, DictBackend
from dulwich.web import WSGIRequestHandlerLogger, WSGIServerLogger, make_wsgi_chain

from sources.kinds.base import (
    ConfigInvalid,
    Item,
    ItemProblem,
    Limits,
    ListingFailed,
    Problem,
)
from sources.kinds.git import GitKind
from sources.patterns import Patterns

MAIN = Ref(b"refs/heads/main")
T0 = 1_700_000_000  # commit times: one per commit from here, a minute apart


class Origin:
    """A Git repository with a working tree, changed through dulwich's porcelain."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        self.repo = porcelain.init(str(root))
        self.repo.refs.set_symbolic_ref(Ref(b"HEAD"), MAIN)
        self.commits = 0

    def write(self, path: str, data: str | bytes) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)
        porcelain.add(self.repo, paths=[str(target)])

    def remove(self, path: str) -> None:
        porcelain.rm(self.repo, paths=[str(self.root / path)])

    def move(self, source: str, destination: str) -> None:
        (self.root / destination).parent.mkdir(parents=True, exist_ok=True)
        porcelain.mv(self.repo, str(self.root / source), str(self.root / destination))

    def commit(self, message: str = "change") -> str:
        self.commits += 1
        sha = porcelain.commit(
            self.repo,
            message=message.encode(),
            author=b"Test <test@example.com>",
            committer=b"Test <test@example.com>",
            commit_timestamp=self.time,
            commit_timezone=3600,
        )
        return sha.decode()

    @property
    def time(self) -> int:
        return T0 + 60 * self.commits

    def close(self) -> None:
        self.repo.close()


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[Origin]:
    repo = Origin(tmp_path / "origin")
    yield repo
    repo.close()


@pytest.fixture
def make_kind(tmp_path: Path) -> Iterator[Callable[..., GitKind]]:
    made: list[GitKind] = []

    def make(
        url: str,
        *,
        branch: str = "main",
        credentials: dict[str, str] | None = None,
        allow_private: bool = True,
        cache: str = "cache",
        **limits: Any,
    ) -> GitKind:
        config = GitKind.check_config({"url": url, "branch": branch}, allow_private=True)
        kind = GitKind(
            config=config,
            credentials=credentials or {},
            patterns=Patterns.of(exclude=["*.tmp"]),
            limits=Limits(
                max_item_bytes=limits.pop("max_item_bytes", 10_000),
                max_items=limits.pop("max_items", 1_000),
                timeout=5.0,
                allow_private=allow_private,
                cache_dir=str(tmp_path / cache) if cache else "",
            ),
        )
        made.append(kind)
        return kind

    yield make
    for kind in made:
        kind.close()


@dataclass
class Listed:
    items: dict[str, Item]
    problems: dict[str, Problem]

    @property
    def manifest(self) -> dict[str, dict[str, Any]]:
        """What the sync engine hands back as `previous` next time."""
        return {path: {**item.state, "version": item.version} for path, item in self.items.items()}


def listed(kind: GitKind, previous: dict[str, dict[str, Any]] | None = None) -> Listed:
    items: dict[str, Item] = {}
    problems: dict[str, Problem] = {}
    for entry in kind.listing(previous or {}):
        if isinstance(entry, Item):
            items[entry.path] = entry
        else:
            problems[entry.path] = entry
    return Listed(items, problems)


def compared(before: Listed, now: Listed) -> dict[str, set[str]]:
    old, new = before.items, now.items
    return {
        "new": set(new) - set(old),
        "changed": {p for p in set(new) & set(old) if new[p].version != old[p].version},
        "unchanged": {p for p in set(new) & set(old) if new[p].version == old[p].version},
        "gone": set(old) - set(new),
    }


def blob_id(data: str) -> str:
    return Blob.from_string(data.encode()).id.decode()


README = "---\ntitle: Read me\ntags: [a, b]\n---\n# Hello\n"


def test_each_commit_lists_exactly_what_it_added_changed_renamed_and_deleted(
    origin: Origin, make_kind: Callable[..., GitKind]
) -> None:
    # given a repository with Markdown, a nested folder and a file the patterns exclude
    origin.write("README.md", README)
    origin.write("docs/guide/intro.txt", "intro one")
    origin.write("data.csv", "a,b\n1,2\n")
    origin.write("scratch.tmp", "not wanted")
    first = origin.commit("first")
    kind = make_kind(str(origin.root))

    one = listed(kind)
    assert set(one.items) == {"README.md", "docs/guide/intro.txt", "data.csv"}
    assert one.problems == {}
    readme = one.items["README.md"]
    assert readme.version == blob_id(README)
    assert readme.size == len(README)
    assert readme.metadata["commit"] == first
    assert readme.metadata["committed"] == "2023-11-14T23:14:20+01:00"
    assert readme.modified == datetime.fromtimestamp(T0 + 60, UTC)
    fetched = kind.fetch(readme)
    assert fetched.data == README.encode()
    assert fetched.metadata == {"title": "Read me", "tags": ["a", "b"]}
    assert kind.fetch(one.items["data.csv"]).metadata == {}

    # when a file changes and one is added
    origin.write("docs/guide/intro.txt", "intro two")
    origin.write("docs/new.txt", "new")
    second = origin.commit("second")
    two = listed(kind, one.manifest)
    assert compared(one, two) == {
        "new": {"docs/new.txt"},
        "changed": {"docs/guide/intro.txt"},
        "unchanged": {"README.md", "data.csv"},
        "gone": set(),
    }
    assert two.items["docs/guide/intro.txt"].metadata["commit"] == second
    assert kind.fetch(two.items["docs/guide/intro.txt"]).data == b"intro two"

    # when a file is renamed: a delete and an add of the same bytes
    origin.move("data.csv", "tables/data.csv")
    origin.commit("rename")
    three = listed(kind, two.manifest)
    assert compared(two, three) == {
        "new": {"tables/data.csv"},
        "changed": set(),
        "unchanged": {"README.md", "docs/guide/intro.txt", "docs/new.txt"},
        "gone": {"data.csv"},
    }
    assert three.items["tables/data.csv"].version == two.items["data.csv"].version

    # when a file is deleted
    origin.remove("README.md")
    origin.commit("delete")
    four = listed(kind, three.manifest)
    assert compared(three, four) == {
        "new": set(),
        "changed": set(),
        "unchanged": {"docs/guide/intro.txt", "docs/new.txt", "tables/data.csv"},
        "gone": {"README.md"},
    }

    # when only an excluded file changes, nothing does
    origin.write("scratch.tmp", "still not wanted")
    last = origin.commit("excluded only")
    five = listed(kind, four.manifest)
    assert compared(four, five)["unchanged"] == set(four.items) == set(five.items)
    assert all(item.metadata["commit"] == last for item in five.items.values())
    # an unchanged item's state is the same, so the engine rewrites no manifest row
    assert five.manifest == four.manifest


def test_an_unchanged_version_takes_its_size_from_the_previous_run(
    origin: Origin, make_kind: Callable[..., GitKind]
) -> None:
    origin.write("a.txt", "12345")
    origin.commit()
    kind = make_kind(str(origin.root))
    first = listed(kind)
    # the blob is not read again when the version is the one the last run saw
    previous = {"a.txt": {**first.manifest["a.txt"], "size": 999}}
    assert listed(kind, previous).items["a.txt"].size == 999
    # a different version is read
    previous = {"a.txt": {"version": "0" * 40, "size": 999}}
    assert listed(kind, previous).items["a.txt"].size == 5


def test_another_branch_is_listed_alone(
    tmp_path: Path, origin: Origin, make_kind: Callable[..., GitKind]
) -> None:
    origin.write("shared.txt", "both")
    origin.commit()
    porcelain.branch_create(origin.repo, "feature")
    porcelain.checkout(origin.repo, "feature")
    origin.write("feature.txt", "only on feature")
    origin.commit()
    porcelain.checkout(origin.repo, "main")
    origin.write("main.txt", "only on main")
    origin.commit()

    assert set(listed(make_kind(str(origin.root), branch="feature")).items) == {
        "shared.txt",
        "feature.txt",
    }
    assert set(listed(make_kind(str(origin.root), cache="other")).items) == {
        "shared.txt",
        "main.txt",
    }
    # and only the branch asked for is fetched
    with Repo(str(tmp_path / "other")) as cache:
        assert Blob.from_string(b"only on feature").id not in cache.object_store
        assert Blob.from_string(b"only on main").id in cache.object_store


def test_a_branch_that_does_not_exist_fails_the_listing(
    origin: Origin, make_kind: Callable[..., GitKind]
) -> None:
    origin.write("a.txt", "a")
    origin.commit()
    with pytest.raises(ListingFailed, match=r"no branch 'develop' \(its branches: main\)"):
        listed(make_kind(str(origin.root), branch="develop"))


def test_a_place_that_is_no_repository_fails_the_listing(
    tmp_path: Path, make_kind: Callable[..., GitKind]
) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ListingFailed, match="no Git repository"):
        listed(make_kind(str(tmp_path / "empty")))
    # nothing listens on a port just closed
    with make_server("127.0.0.1", 0, lambda environ, start: []) as server:
        port = server.server_port
    with pytest.raises(ListingFailed, match="cannot be fetched"):
        listed(make_kind(f"http://127.0.0.1:{port}/repo.git", cache="other"))


@pytest.mark.parametrize(
    ("url", "allow_private", "message"),
    [
        ("ftp://example.com/repo.git", True, "https:// or http://"),
        ("git@github.com:org/repo.git", True, "https:// or http://"),
        ("https://user:secret@example.com/repo.git", True, "credentials, not the URL"),
        ("http://127.0.0.1/repo.git", False, "loopback, link-local or private"),
        ("/srv/repo", False, "server's own disk"),
        ("file:///srv/repo", False, "server's own disk"),
        ("/nowhere/at/all", True, "not a folder"),
    ],
)
def test_config_refuses(url: str, allow_private: bool, message: str) -> None:
    with pytest.raises(ConfigInvalid, match=message):
        GitKind.check_config({"url": url}, allow_private=allow_private)


def test_config_stores_the_branch_and_the_path(tmp_path: Path) -> None:
    checked = GitKind.check_config({"url": f"file://{tmp_path}/"}, allow_private=True)
    assert checked == {"url": str(tmp_path), "branch": "main"}
    checked = GitKind.check_config(
        {"url": "https://1.1.1.1/r.git", "branch": "refs/heads/docs"}, allow_private=False
    )
    assert checked["branch"] == "docs"
    with pytest.raises(ConfigInvalid, match="not a valid branch"):
        GitKind.check_config({"url": str(tmp_path), "branch": "a..b"}, allow_private=True)


def test_private_places_are_refused_at_run_time_too(
    origin: Origin, make_kind: Callable[..., GitKind]
) -> None:
    origin.write("a.txt", "a")
    origin.commit()
    with pytest.raises(ListingFailed, match="CANON_SOURCES_ALLOW_PRIVATE"):
        listed(make_kind(str(origin.root), allow_private=False))
    # an http URL is checked by every request the Git client makes
    with pytest.raises(ListingFailed, match="loopback, link-local or private"):
        listed(make_kind("http://127.0.0.1:9/repo.git", allow_private=False))


def pack_files(cache: Path) -> dict[str, int]:
    pack = cache / "objects" / "pack"
    return {name: (pack / name).stat().st_ino for name in os.listdir(pack)}


def test_the_cache_is_fetched_into_not_cloned_again(
    tmp_path: Path, origin: Origin, make_kind: Callable[..., GitKind]
) -> None:
    origin.write("a.txt", "a")
    origin.commit()
    listed(make_kind(str(origin.root)))
    cache = tmp_path / "cache"
    first = pack_files(cache)
    assert len(first) == 2  # one pack and its index

    # a later run with nothing new fetches nothing
    listed(make_kind(str(origin.root)))
    assert pack_files(cache) == first

    # a new commit arrives as a second pack beside the first, which is left alone
    origin.write("b.txt", "b")
    origin.commit()
    assert set(listed(make_kind(str(origin.root))).items) == {"a.txt", "b.txt"}
    now = pack_files(cache)
    assert len(now) == 4
    assert {name: now[name] for name in first} == first


def test_a_damaged_cache_is_fetched_again(
    tmp_path: Path, origin: Origin, make_kind: Callable[..., GitKind]
) -> None:
    origin.write("a.txt", "a")
    origin.write("b/c.md", README)
    origin.commit()
    before = listed(make_kind(str(origin.root)))
    cache = tmp_path / "cache"
    for name in pack_files(cache):
        path = cache / "objects" / "pack" / name
        path.write_bytes(b"\0garbage" * (path.stat().st_size // 8 + 1))

    kind = make_kind(str(origin.root))
    after = listed(kind)
    assert {p: i.version for p, i in after.items.items()} == {
        p: i.version for p, i in before.items.items()
    }
    assert kind.fetch(after.items["b/c.md"]).data == README.encode()
    assert all(
        not (cache / "objects" / "pack" / name).read_bytes().startswith(b"\0garbage")
        for name in pack_files(cache)
    )


def test_a_cache_made_for_another_url_is_replaced_and_a_foreign_folder_kept(
    tmp_path: Path, origin: Origin, make_kind: Callable[..., GitKind]
) -> None:
    origin.write("a.txt", "a")
    origin.commit()
    other = Origin(tmp_path / "other")
    other.write("z.txt", "z")
    other.commit()
    listed(make_kind(str(other.root)))
    other.close()
    assert set(listed(make_kind(str(origin.root))).items) == {"a.txt"}
    assert len(pack_files(tmp_path / "cache")) == 2  # the other repository's pack is gone

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(ListingFailed, match="holds something else"):
        listed(make_kind(str(origin.root), cache="foreign"))
    assert (foreign / "keep.txt").read_text() == "mine"
    with pytest.raises(ListingFailed, match="cache directory"):
        listed(make_kind(str(origin.root), cache=""))


def test_fetch_after_the_cache_is_gone_fetches_again(
    tmp_path: Path, origin: Origin, make_kind: Callable[..., GitKind]
) -> None:
    # given a listing made by another worker whose cache is not here
    origin.write("a.txt", "hello")
    origin.commit()
    item = listed(make_kind(str(origin.root), cache="elsewhere")).items["a.txt"]
    kind = make_kind(str(origin.root))
    assert kind.fetch(item).data == b"hello"
    with pytest.raises(ItemProblem, match="no longer in the branch"):
        kind.fetch(Item(path="gone.txt", version=blob_id("never committed")))
    with pytest.raises(ItemProblem, match="over the limit"):
        kind.fetch(Item(path="a.txt", version=item.version, size=10_001))


def test_links_submodules_large_files_and_the_item_limit_are_reported(
    origin: Origin, make_kind: Callable[..., GitKind]
) -> None:
    origin.write("big.txt", "x" * 10_001)
    origin.write("small.txt", "s")
    os.symlink("small.txt", origin.root / "link.txt")
    porcelain.add(origin.repo, paths=[str(origin.root / "link.txt")])
    origin.commit()
    with_submodule(origin.repo, b"vendor/lib")

    found = listed(make_kind(str(origin.root)))
    assert set(found.items) == {"small.txt"}
    assert {path: p.reason for path, p in found.problems.items()} == {
        "big.txt": "10,001 bytes, over the limit of 10,000 bytes",
        "link.txt": "symbolic link, not followed",
        "vendor/lib": "submodule, not followed",
    }
    assert not any(p.incomplete for p in found.problems.values())

    limited = listed(make_kind(str(origin.root), cache="other", max_items=2))
    assert len(limited.items) + len(limited.problems) == 3
    assert [p.incomplete for p in limited.problems.values()].count(True) == 1


def with_submodule(repo: Repo, path: bytes) -> None:
    """A commit on main adding a gitlink (what `git submodule add` records) at `path`."""
    head = repo[repo.refs[MAIN]]
    assert isinstance(head, Commit)
    inner = Tree()
    inner.add(path.rsplit(b"/", 1)[1], 0o160000, ObjectID(b"1" * 40))
    old_top = repo[head.tree]
    assert isinstance(old_top, Tree)
    top = Tree()
    for entry in old_top.items():
        top.add(entry.path, entry.mode, entry.sha)
    top.add(path.split(b"/", 1)[0], 0o040000, inner.id)
    commit = Commit()
    commit.tree, commit.parents = top.id, [head.id]
    commit.author = commit.committer = b"Test <test@example.com>"
    commit.author_time = commit.commit_time = T0
    commit.author_timezone = commit.commit_timezone = 0
    commit.message = b"submodule"
    for obj in (inner, top, commit):
        repo.object_store.add_object(obj)
    repo.refs[MAIN] = commit.id


# Over HTTP.

USER, PASSWORD = "reader", "s3cret-token-42"


def basic_auth(app: Callable[..., Any]) -> Callable[..., Any]:
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("HTTP_AUTHORIZATION") != expected:
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="git"')])
            return [b"no"]
        return app(environ, start_response)

    return guarded


@pytest.fixture
def serve(origin: Origin) -> Iterator[Callable[..., str]]:
    """Serves tmp_path/origin as /origin over smart HTTP on loopback; returns the base URL."""
    servers: list[Any] = []

    def start(*, auth: bool = False) -> str:
        app = make_wsgi_chain(DictBackend({"/origin": cast(BackendRepo, origin.repo)}))
        server = make_server(
            "127.0.0.1",
            0,
            basic_auth(app) if auth else app,
            server_class=WSGIServerLogger,
            handler_class=WSGIRequestHandlerLogger,
        )
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_over_http(
    origin: Origin, make_kind: Callable[..., GitKind], serve: Callable[..., str]
) -> None:
    origin.write("README.md", README)
    origin.commit()
    kind = make_kind(f"{serve()}/origin")
    one = listed(kind)
    assert set(one.items) == {"README.md"}
    assert kind.fetch(one.items["README.md"]).metadata["title"] == "Read me"

    origin.write("docs/b.txt", "b")
    origin.commit()
    assert compared(one, listed(kind, one.manifest))["new"] == {"docs/b.txt"}
    with pytest.raises(ListingFailed, match="no Git repository"):
        listed(make_kind(f"{serve()}/missing", cache="other"))


def test_a_name_that_resolves_public_then_connects_private_is_refused(
    origin: Origin,
    make_kind: Callable[..., GitKind],
    serve: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DNS rebinding: the check before each request sees a public address, the connection
    reaches loopback; the address the connection reached is checked before it is used."""
    from sources import network

    origin.write("a.txt", "a")
    origin.commit()
    url = f"{serve()}/origin".replace("127.0.0.1", "localhost")
    monkeypatch.setattr(network, "_addresses", lambda host: [ipaddress.ip_address("192.0.32.10")])
    with pytest.raises(ListingFailed, match=r"localhost led to a loopback.*127\.0\.0\.1"):
        listed(make_kind(url, allow_private=False))
    # allowed, the same URL is read
    assert set(listed(make_kind(url, cache="allowed")).items) == {"a.txt"}


def test_over_http_with_basic_auth(
    tmp_path: Path, origin: Origin, make_kind: Callable[..., GitKind], serve: Callable[..., str]
) -> None:
    origin.write("a.txt", "a")
    origin.commit()
    url = f"{serve(auth=True)}/origin"

    kind = make_kind(url, credentials={"username": USER, "password": PASSWORD})
    assert set(listed(kind).items) == {"a.txt"}
    for path in (tmp_path / "cache").rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes()

    with pytest.raises(ListingFailed, match="asks for credentials") as refused:
        listed(make_kind(url, cache="c2"))
    wrong = {"username": USER, "password": PASSWORD + "-wrong"}
    with pytest.raises(ListingFailed, match="refused the credentials") as wrong_refused:
        listed(make_kind(url, credentials=wrong, cache="c3"))
    for message in (str(refused.value), str(wrong_refused.value)):
        assert PASSWORD not in message
        assert USER not in message
