"""B8's second corpus (bench/quality2): Mallard rendering, the translated-page rule, selection
and keys, and the package and write steps it shares with the first corpus (bench/quality)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench.quality import corpus as corpus1
from bench.quality2 import corpus, mallard

MALLARD_NS = (
    'xmlns="http://projectmallard.org/1.0/" xmlns:if="http://projectmallard.org/if/1.0/" '
    'xmlns:its="http://www.w3.org/2005/11/its"'
)


def _page(directory: Path, page_id: str, body: str, *, guide: str = "", desc: str = "") -> None:
    links = f'<link type="guide" xref="{guide}"/>' if guide else ""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{page_id}.page").write_text(
        f'<?xml version="1.0" encoding="utf-8"?>\n<page {MALLARD_NS} type="topic" id="{page_id}">'
        f"<info>{links}<credit><name>An Author</name><email>a@example.org</email></credit>"
        f"<desc>{desc}</desc></info>{body}</page>",
        encoding="utf-8",
    )


@pytest.fixture
def help_dir(tmp_path: Path) -> Path:
    d = tmp_path / "C" / "demo"
    _page(d, "index", "<title>Demo Help</title><p>Welcome.</p>")
    _page(
        d,
        "copy",
        """<title>Copy text</title>
        <comment><p>Editorial note nobody should see.</p></comment>
        <p>Select the text, then press <keyseq><key>Ctrl</key><key>C</key></keyseq>
        or choose <guiseq><gui>Edit</gui><gui>Copy</gui></guiseq>.</p>
        <steps><item><p>Open <link xref="index"/>.</p></item><item><p>Paste.</p></item></steps>
        <if:choose>
          <if:when test="platform:gnome-classic"><p>Classic only text.</p></if:when>
          <if:else><p>Shell text.</p></if:else>
        </if:choose>
        <p if:test="action:install">Install-only text.</p>
        <section id="more"><title>More</title>
          <terms><item><title>Clipboard</title><p>Where copied text waits.</p></item></terms>
          <table><tr><td><p>Cell A</p></td><td><p>Cell B</p></td></tr></table>
          <media type="image" src="x.png"><p>Picture caption fallback</p></media>
        </section>""",
        guide="index",
        desc="Put text on the clipboard.",
    )
    return d


def test_mallard_page_renders_what_yelp_shows(help_dir: Path) -> None:
    help_ = mallard.Help.load(help_dir)
    html = mallard.render(help_, "copy", "en")
    assert "<title>Copy text</title>" in html and "<h1>Copy text</h1>" in html
    assert "Ctrl+C" in html and "Edit ▸ Copy" in html
    assert "<ol>" in html and html.count("<li>") == 2
    assert "Open Demo Help." in html  # a link with no text shows its target's title
    assert "Shell text." in html and "Classic only text." not in html
    assert "Install-only text." not in html
    assert "<h2>More</h2>" in html and "<dt>Clipboard</dt>" in html and "Cell B" in html
    # Left out, as Yelp leaves them out: the info block, editorial comments, images.
    for hidden in ("An Author", "a@example.org", "Editorial note", "Picture caption"):
        assert hidden not in html
    assert 'content="Put text on the clipboard."' in html


def test_a_guide_page_lists_the_topics_that_name_it(help_dir: Path) -> None:
    html = mallard.render(mallard.Help.load(help_dir), "index", "en")
    assert "<li>Copy text: Put text on the clipboard.</li>" in html


def test_rendering_is_a_pure_function_of_the_files(help_dir: Path) -> None:
    first = mallard.render(mallard.Help.load(help_dir), "copy", "en")
    assert mallard.render(mallard.Help.load(help_dir), "copy", "en") == first


@pytest.mark.parametrize(
    ("test", "expected"),
    [
        (None, True),
        ("platform:gnome-classic", False),
        ("!platform:gnome-classic", True),
        ("action:install", False),
        ("platform:gnome-classic, !target:mobile", True),
        ("!target:mobile platform:gnome-classic", False),
    ],
)
def test_mallard_conditions(test: str | None, expected: bool) -> None:
    assert mallard.condition(test) is expected


def _html(body: str, chrome: str = "") -> bytes:
    return (
        f"<html><head><title>t</title></head><body><header><p>{chrome}</p></header>"
        f"<aside><p>{chrome}</p></aside>{body}</body></html>"
    ).encode()


def test_a_chinese_page_is_kept_only_when_it_is_really_translated() -> None:
    chinese = "<p>选择要添加自动筛选的列，然后选择数据菜单。</p><p>点击列头的箭头可以筛选。</p>"
    english = (
        "<p>Select the column you want to filter first.</p>"
        "<p>Then choose the filter command from the menu.</p><p>点击列头的箭头可以筛选。</p>"
    )
    # Chinese navigation around English text is an untranslated fallback page.
    assert corpus.translated(_html(english, chrome="帮助目录索引模块搜索")) is None
    page = _html(chinese)
    assert corpus.translated(page) == page
    assert corpus.translated(_html("<p>ok</p>")) is None  # no block long enough to judge


def test_sqlite_pages_lose_their_inline_svg(tmp_path: Path) -> None:
    page = tmp_path / "lang_select.html"
    page.write_bytes(b"<p>SELECT reads rows.</p><svg><text>expr</text></svg><p>More.</p>")
    out = corpus.without_svg(page)
    assert out is not None and b"<svg" not in out and b"expr" not in out
    assert b"SELECT reads rows." in out and b"More." in out


def _touch(root: Path, rel: str, text: str = "<p>x</p>") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_selection_keys_languages_and_skips(tmp_path: Path) -> None:
    roots = {package: tmp_path / package for package in corpus.PACKAGES}
    _touch(roots["installation-guide-amd64"], "usr/share/doc/installation-guide-amd64/en/ch01.html")
    _touch(
        roots["installation-guide-amd64"], "usr/share/doc/installation-guide-amd64/zh_CN/ch01.html"
    )
    _touch(roots["gnome-user-docs"], "usr/share/help/C/gnome-help/files.page")
    _touch(roots["gnome-user-docs"], "usr/share/help/zh_CN/gnome-help/files.page")
    _touch(roots["gnome-user-docs"], "usr/share/help/C/system-admin-guide/login.page")
    _touch(roots["maint-guide"], "usr/share/doc/maint-guide/html/first.en.html")
    _touch(roots["maint-guide-zh-cn"], "usr/share/doc/maint-guide-zh-cn/html/first.zh-cn.html")
    _touch(roots["sqlite3-doc"], "usr/share/doc/sqlite3/lang_select.html")
    _touch(roots["sqlite3-doc"], "usr/share/doc/sqlite3/capi3ref.html")  # a one-page copy
    _touch(roots["sqlite3-doc"], "usr/share/doc/sqlite3/c3ref/open.html")
    _touch(roots["apache2-doc"], "usr/share/doc/apache2-doc/manual/en/mod/core.html")
    _touch(roots["apache2-doc"], "usr/share/doc/apache2-doc/manual/zh-cn/index.html")
    lo = "usr/share/libreoffice/help/zh-CN/text"
    _touch(roots["libreoffice-help-zh-cn"], f"{lo}/scalc/guide/autofilter.html")
    _touch(roots["libreoffice-help-zh-cn"], f"{lo}/scalc/01/func_sum.html")  # not selected
    link = roots["sqlite3-doc"] / "usr/share/doc/sqlite3/alias.html"
    link.symlink_to(link.parent / "lang_select.html")  # symlinks are never documents

    docs = {d.key: d for d in corpus.select(roots)}
    assert set(docs) == {
        "en/install/ch01.html",
        "zh/install/ch01.html",
        "en/gnome-help/files.html",
        "zh/gnome-help/files.html",
        "en/gnome-admin/login.html",
        "en/maint-guide/first.html",
        "zh/maint-guide/first.html",
        "en/sqlite/lang_select.html",
        "en/sqlite/c3ref/open.html",
        "en/apache/mod/core.html",
        "zh/libreoffice/scalc/guide/autofilter.html",
    }
    assert all(d.lang == d.key[:2] for d in docs.values())
    assert docs["zh/install/ch01.html"].render is corpus.translated_html
    assert docs["en/sqlite/lang_select.html"].render is corpus.without_svg


def _deb(tmp_path: Path, package: str, version: str) -> Path:
    """A real .deb built by dpkg-deb, holding one document."""
    tree = tmp_path / f"build-{version}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {package}\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: Nobody <nobody@example.org>\nDescription: test\n test\n"
    )
    _touch(tree, "usr/share/doc/demo/page.html", f"<p>version {version}</p>")
    out = tmp_path / "debs" / f"{package}_{version}_all.deb"
    out.parent.mkdir(exist_ok=True)
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(tree), str(out)],
        check=True,
        capture_output=True,
    )
    return out


def test_fetch_prefers_the_pinned_version_and_unpacks_into_the_given_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _deb(tmp_path, "demo-doc", "1.0-1")
    _deb(tmp_path, "demo-doc", "2.0-1")
    debs, unpacked = tmp_path / "debs", tmp_path / "unpacked"
    roots, versions = corpus1.fetch({"demo-doc": "1.0-1"}, debs=debs, unpacked=unpacked)
    assert versions == {"demo-doc": "1.0-1"}
    assert roots["demo-doc"] == unpacked / "demo-doc"
    page = unpacked / "demo-doc/usr/share/doc/demo/page.html"
    assert page.read_text() == "<p>version 1.0-1</p>"
    assert "warning" not in capsys.readouterr().out
    # Pinned to a version that is not there: the newest present one, with a warning.
    roots, versions = corpus1.fetch({"demo-doc": "3.0-1"}, debs=debs, unpacked=unpacked)
    assert versions == {"demo-doc": "2.0-1"} and page.read_text() == "<p>version 2.0-1</p>"
    assert "questions were written for 3.0-1" in capsys.readouterr().out


def test_write_corpus_writes_the_manifest_and_removes_stale_files(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _touch(src, "a.html", "<p>a</p>")
    _touch(src, "b.html", "<p>b</p>")
    out = tmp_path / "corpus"
    _touch(out, "en/old/stale.html")
    docs = [
        corpus1.Doc("en/x/a.html", "en", "pkg-a", src / "a.html", corpus1.copy_bytes),
        corpus1.Doc("zh/x/b.html", "zh", "pkg-b", src / "b.html", lambda _p: None),
    ]
    manifest = corpus1.write_corpus(
        docs, {"pkg-a": "1"}, corpus=out, versions_file=tmp_path / "packages.json"
    )
    assert [m["key"] for m in manifest] == ["en/x/a.html"]  # a render of None leaves it out
    assert manifest[0]["media_type"] == "text/html" and manifest[0]["bytes"] == 8
    assert manifest[0]["source_package"] == "pkg-a"
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert (out / "en/x/a.html").read_text() == "<p>a</p>"
    assert not (out / "en/old/stale.html").exists() and not (out / "zh/x/b.html").exists()
    assert json.loads((tmp_path / "packages.json").read_text()) == {"pkg-a": "1"}


def test_ensure_corpus_builds_only_its_own_directory(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"no manifest\.json"):
        corpus1.ensure_corpus(tmp_path, default=corpus.CORPUS, module="bench.quality2.corpus")
    (tmp_path / "manifest.json").write_text("[]")
    corpus1.ensure_corpus(tmp_path, default=corpus.CORPUS, module="bench.quality2.corpus")
