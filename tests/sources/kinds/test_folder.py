"""The folder kind on real directory trees (tmp_path): a deterministic walk, patterns (with
excluded folders pruned), links never followed, hidden files skipped, limits kept, an unreadable
root a failed listing, and fetch reading only what the listing named."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from sources.kinds.base import (
    ConfigInvalid,
    Item,
    ItemProblem,
    Limits,
    ListingFailed,
    Problem,
    SourceUnavailable,
)
from sources.kinds.folder import FolderKind
from sources.patterns import Patterns


def _tree(root: Path, files: Iterable[str], data: bytes = b"text") -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _kind(
    root: Path,
    *,
    include: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    max_item_bytes: int = 1000,
    max_items: int = 1000,
) -> FolderKind:
    return FolderKind(
        config={"path": str(root)},
        credentials={},
        patterns=Patterns.of(include, exclude),
        limits=Limits(max_item_bytes=max_item_bytes, max_items=max_items, folder_roots=("/",)),
    )


def _items(kind: FolderKind) -> list[str]:
    return [found.path for found in kind.listing({}) if isinstance(found, Item)]


def _problems(kind: FolderKind) -> list[Problem]:
    return [found for found in kind.listing({}) if isinstance(found, Problem)]


def test_a_nested_tree_is_listed_in_path_order(tmp_path: Path) -> None:
    _tree(tmp_path, ["b.md", "a/z.txt", "a/b/c.md", "a.md", "a-b.txt", "c/d/e/f.pdf"])
    (tmp_path / "empty").mkdir()

    listed = list(_kind(tmp_path).listing({}))

    paths = [found.path for found in listed]
    assert paths == ["a-b.txt", "a.md", "a/b/c.md", "a/z.txt", "b.md", "c/d/e/f.pdf"]
    assert paths == sorted(paths)
    assert all(isinstance(found, Item) for found in listed)
    item = listed[1]
    assert isinstance(item, Item)
    st = (tmp_path / "a.md").stat()
    assert item.version == f"{st.st_mtime_ns}-{st.st_size}"
    assert item.size == 4
    assert item.modified is not None and item.modified.utcoffset() is not None
    assert abs(item.modified.timestamp() - st.st_mtime) < 0.001


def test_include_and_exclude_patterns_with_double_stars(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        ["docs/a.md", "docs/deep/er/b.md", "docs/c.pdf", "docs/drafts/d.md", "e.md", "x/docs/f.md"],
    )

    assert _items(_kind(tmp_path, include=("docs/**/*.md",))) == [
        "docs/a.md",
        "docs/deep/er/b.md",
        "docs/drafts/d.md",
    ]
    assert _items(_kind(tmp_path, include=("**/*.md",), exclude=("drafts/", "deep"))) == [
        "docs/a.md",
        "e.md",
        "x/docs/f.md",
    ]
    assert _items(_kind(tmp_path, exclude=("*.md",))) == ["docs/c.pdf"]


def _scanned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every folder the walk opens."""
    scanned: list[str] = []
    real_scandir = os.scandir

    def scandir(path: str) -> object:
        scanned.append(str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return scanned


def test_an_excluded_folder_is_not_walked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path, ["keep.md", "build/out.md", "build/deep/x.md", "src/build/y.md"])
    scanned = _scanned(monkeypatch)

    listed = list(_kind(tmp_path, exclude=("build/",)).listing({}))

    assert [found.path for found in listed] == ["keep.md"]
    assert not any("build" in path for path in scanned)
    assert scanned == [str(tmp_path), str(tmp_path / "src")]


def test_a_negated_exclude_takes_a_file_back_from_an_excluded_folder(tmp_path: Path) -> None:
    _tree(tmp_path, ["drafts/a.md", "drafts/keep.md", "b.md"])
    kind = _kind(tmp_path, exclude=("drafts/", "!drafts/keep.md"))

    # the walk agrees with Patterns.admits (pathspec), so the folder is not pruned
    assert kind.patterns.admits("drafts/keep.md")
    assert _items(kind) == ["b.md", "drafts/keep.md"]


def test_a_symbolic_link_is_reported_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    _tree(outside, ["secret.md", "dir/inner.md"])
    root = tmp_path / "root"
    _tree(root, ["real.md"])
    (root / "link.md").symlink_to(outside / "secret.md")
    (root / "linked-dir").symlink_to(outside / "dir")

    listed = list(_kind(root).listing({}))

    assert [(f.path, type(f).__name__) for f in listed] == [
        ("link.md", "Problem"),
        ("linked-dir", "Problem"),
        ("real.md", "Item"),
    ]
    assert all(f.reason == "symbolic link, not followed" for f in listed if isinstance(f, Problem))
    assert not any(f.incomplete for f in listed if isinstance(f, Problem))


def test_a_special_file_is_a_problem(tmp_path: Path) -> None:
    _tree(tmp_path, ["a.md"])
    os.mkfifo(tmp_path / "pipe")

    listed = list(_kind(tmp_path).listing({}))

    assert listed[1] == Problem("pipe", "not a regular file")


def test_hidden_files_and_folders_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path, [".env", ".git/config", "docs/.DS_Store", "docs/.hidden/a.md", "docs/b.md"])
    scanned = _scanned(monkeypatch)

    listed = list(_kind(tmp_path).listing({}))

    assert [(f.path, type(f).__name__) for f in listed] == [("docs/b.md", "Item")]
    assert scanned == [str(tmp_path), str(tmp_path / "docs")]


def test_an_oversized_file_is_a_problem_not_an_item(tmp_path: Path) -> None:
    _tree(tmp_path, ["small.md"], b"x" * 10)
    _tree(tmp_path, ["big.pdf"], b"x" * 11)

    listed = list(_kind(tmp_path, max_item_bytes=10).listing({}))

    assert listed[0] == Problem("big.pdf", "11 bytes, over the limit of 10 bytes")
    assert [f.path for f in listed[1:]] == ["small.md"]
    assert isinstance(listed[1], Item)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a folder whatever its mode")
def test_an_unreadable_folder_makes_the_listing_incomplete(tmp_path: Path) -> None:
    _tree(tmp_path, ["a.md", "locked/b.md", "z.md"])
    os.chmod(tmp_path / "locked", 0)
    try:
        listed = list(_kind(tmp_path).listing({}))
    finally:
        os.chmod(tmp_path / "locked", 0o700)

    assert [f.path for f in listed] == ["a.md", "locked", "z.md"]
    problem = listed[1]
    assert isinstance(problem, Problem) and problem.incomplete
    assert "cannot be read" in problem.reason


def test_a_folder_scandir_refuses_makes_the_listing_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root (where chmod cannot lock a folder), an OSError from scandir stands in."""
    _tree(tmp_path, ["a.md", "locked/b.md"])
    real_scandir = os.scandir

    def scandir(path: str) -> object:
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)

    listed = list(_kind(tmp_path).listing({}))

    assert listed[1] == Problem("locked", "folder cannot be read: permission denied", True)


def test_a_missing_or_unreadable_root_fails_the_listing(tmp_path: Path) -> None:
    missing = _kind(tmp_path / "unmounted")
    with pytest.raises(ListingFailed, match=f"The folder {tmp_path}/unmounted cannot be read"):
        list(missing.listing({}))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ListingFailed, match="not a directory"):
        list(_kind(tmp_path / "file").listing({}))


def test_the_version_changes_when_the_content_does(tmp_path: Path) -> None:
    def versions() -> dict[str, str]:
        return {f.path: f.version for f in _kind(tmp_path).listing({}) if isinstance(f, Item)}

    _tree(tmp_path, ["a.md", "b.md"])
    os.utime(tmp_path / "a.md", ns=(1_000_000_000, 1_000_000_000))
    first = versions()

    (tmp_path / "a.md").write_text("same")  # same size, a new mtime
    second = versions()
    (tmp_path / "a.md").write_text("longer")  # a new size, the mtime put back
    os.utime(tmp_path / "a.md", ns=(1_000_000_000, 1_000_000_000))
    third = versions()

    assert len({first["a.md"], second["a.md"], third["a.md"]}) == 3
    assert first["b.md"] == second["b.md"] == third["b.md"]
    assert third["a.md"] == "1000000000-6"


def test_the_item_limit_cuts_the_listing_and_says_so(tmp_path: Path) -> None:
    _tree(tmp_path, [f"{n}.md" for n in range(5)])

    listed = list(_kind(tmp_path, max_items=3).listing({}))

    assert [f.path for f in listed] == ["0.md", "1.md", "2.md", "3.md"]
    assert all(isinstance(f, Item) for f in listed[:3])
    last = listed[3]
    assert isinstance(last, Problem) and last.incomplete and "item limit 3 reached" in last.reason
    assert all(isinstance(f, Item) for f in _kind(tmp_path, max_items=5).listing({}))


def test_fetch_reads_bytes_and_markdown_front_matter(tmp_path: Path) -> None:
    _tree(tmp_path, ["docs/a.md"], b"---\ntitle: Herons\n---\n# Herons\n")
    _tree(tmp_path, ["docs/b.txt"], b"---\ntitle: not read\n---\n")
    kind = _kind(tmp_path)
    items = {f.path: f for f in kind.listing({}) if isinstance(f, Item)}

    fetched = kind.fetch(items["docs/a.md"])
    plain = kind.fetch(items["docs/b.txt"])

    assert fetched.data == b"---\ntitle: Herons\n---\n# Herons\n"
    assert fetched.metadata == {"title": "Herons"} and fetched.media_type == ""
    assert plain.metadata == {}


def test_fetch_refuses_what_changed_since_the_listing(tmp_path: Path) -> None:
    _tree(tmp_path, ["a.md", "b.md", "dir/c.md"], b"x" * 5)
    (tmp_path / "outside.md").write_text("secret")
    root = tmp_path
    kind = _kind(root, max_item_bytes=10)
    items = {f.path: f for f in kind.listing({}) if isinstance(f, Item)}

    (root / "a.md").unlink()
    with pytest.raises(ItemProblem, match=re.escape("a.md is gone since it was listed")):
        kind.fetch(items["a.md"])

    (root / "b.md").write_bytes(b"x" * 11)
    with pytest.raises(ItemProblem, match="11 bytes, over the limit of 10"):
        kind.fetch(items["b.md"])

    (root / "dir" / "c.md").unlink()
    (root / "dir").rmdir()
    (root / "dir").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "c.md").write_text("secret")
    with pytest.raises(
        ItemProblem, match=re.escape("dir/c.md is or passes a symbolic link, not followed")
    ):
        kind.fetch(items["dir/c.md"])

    (root / "b.md").unlink()
    (root / "b.md").symlink_to(tmp_path / "outside.md")
    with pytest.raises(
        ItemProblem, match=re.escape("b.md is or passes a symbolic link, not followed")
    ):
        kind.fetch(items["b.md"])

    (root / "b.md").unlink()
    os.mkfifo(root / "b.md")
    with pytest.raises(ItemProblem, match=re.escape("b.md is not a regular file")):
        kind.fetch(items["b.md"])

    with pytest.raises(ItemProblem, match="not a path inside the folder"):
        kind.fetch(Item(path="../outside.md", version="1"))


def test_fetch_when_the_root_is_gone_stops_the_run(tmp_path: Path) -> None:
    root = tmp_path / "share"
    _tree(root, ["a.md"])
    kind = _kind(root)
    item = next(f for f in kind.listing({}) if isinstance(f, Item))
    (root / "a.md").unlink()
    root.rmdir()

    with pytest.raises(SourceUnavailable, match=f"The folder {root} cannot be read"):
        kind.fetch(item)


def test_the_configuration_must_name_an_existing_absolute_folder(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")

    assert FolderKind.check_config({"path": f"{tmp_path}/"}, allow_private=False) == {
        "path": str(tmp_path)
    }
    with pytest.raises(ConfigInvalid, match="'relative/path' is not an absolute path"):
        FolderKind.check_config({"path": "relative/path"}, allow_private=False)
    with pytest.raises(ConfigInvalid, match=f"{tmp_path}/nowhere does not exist"):
        FolderKind.check_config({"path": f"{tmp_path}/nowhere"}, allow_private=False)
    with pytest.raises(ConfigInvalid, match=f"{tmp_path}/file is not a folder"):
        FolderKind.check_config({"path": f"{tmp_path}/file"}, allow_private=False)
    with pytest.raises(ConfigInvalid, match="needs 'path'"):
        FolderKind.check_config({}, allow_private=False)
    with pytest.raises(ConfigInvalid, match="no setting 'bucket'"):
        FolderKind.check_config({"path": str(tmp_path), "bucket": "x"}, allow_private=False)
