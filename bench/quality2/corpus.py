"""Build B8's second retrieval-quality corpus, or check its questions (issue 38).

    python -m bench.quality2.corpus            # download, unpack, select, write corpus + manifest
    python -m bench.quality2.corpus --check    # natural.jsonl against the manifest, per kind
    python -m bench.quality2.corpus --estimate # also estimate chunks with Canon's own parsers

Other packages and domains than `bench/quality`'s corpus, for measuring a ranking fitted on one
corpus on the other: the Debian installation guide (English and Chinese), GNOME's desktop help
and five GNOME applications' help (Mallard pages in English and Chinese, rendered to HTML by
`bench.quality2.mallard`), the Debian New Maintainers' Guide (English and Chinese), SQLite's and
Apache httpd's manuals (English only) and LibreOffice's how-to guides, Options dialog and chart
pages in Chinese only (its English help is not in the corpus). So some pages have a translation in
the corpus and some do not, which is what the cross-lingual question kinds need (a Chinese
question answered only by English pages, and the reverse).

A Chinese page is kept only when it is really translated: at least half of its text blocks
(paragraphs, list items, cells, headings of 8 letters or more) hold Chinese characters. GNOME's
Chinese help is partly translated; a page that is mostly English fallback is left out, while its
English original stays. The result is a pure function of the package versions (the rendering is
ours, in Python; nothing depends on the clock, the locale or directory order). Everything
downloaded lives under `.data/quality2/` and stays out of git. The package, unpack and write steps
are `bench.quality.corpus`'s.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.quality import check_natural
from bench.quality.corpus import (
    CJK,
    ROOT,
    Doc,
    copy_bytes,
    estimate_chunks,
    fetch,
    report,
    write_corpus,
)
from bench.quality2 import mallard

HERE = Path(__file__).resolve().parent
DATA = ROOT / ".data" / "quality2"
DEBS = DATA / "debs"
UNPACKED = DATA / "unpacked"
CORPUS = DATA / "corpus"
MANIFEST = CORPUS / "manifest.json"
VERSIONS = DATA / "packages.json"
NATURAL = HERE / "natural.jsonl"

# The versions the questions were written against (Debian 12). A newer version still builds, with
# a warning: a page may have moved and an answer key may then be missing (`--check` says so).
PACKAGES: dict[str, str] = {
    "installation-guide-amd64": "20230508+deb12u1",
    "gnome-user-docs": "43.0-2",
    "evince-common": "43.1-2+deb12u1",
    "gedit-common": "44.2-1",
    "gnome-calculator": "1:43.0.1-2",
    "cheese-common": "43.0-1",
    "brasero-common": "3.12.3-2",
    "maint-guide": "1.2.53",
    "maint-guide-zh-cn": "1.2.53",
    "sqlite3-doc": "3.40.1-2+deb12u2",
    "apache2-doc": "2.4.71-1~deb12u1",
    "libreoffice-help-zh-cn": "4:7.4.7-1+deb12u14",
}

# Mallard help directories: package -> (the help's directory name, the key's middle part).
MALLARD = {
    "gnome-user-docs": (("gnome-help", "gnome-help"), ("system-admin-guide", "gnome-admin")),
    "evince-common": (("evince", "evince"),),
    "gedit-common": (("gedit", "gedit"),),
    "gnome-calculator": (("gnome-calculator", "gnome-calculator"),),
    "cheese-common": (("cheese", "cheese"),),
    "brasero-common": (("brasero", "brasero"),),
}

# SQLite pages that are indexes, cross-reference tables, change logs or a one-page copy of the
# C API pages (c3ref/), not documentation of their own.
SQLITE_SKIP = frozenset(
    {
        "capi3ref.html",
        "changes.html",
        "chronology.html",
        "doc_backlink_crossref.html",
        "doc_keyword_crossref.html",
        "doc_pagelink_crossref.html",
        "doc_target_crossref.html",
        "docs.html",
        "doclist.html",
        "keyword_index.html",
        "requirements.html",
        "sitemap.html",
        "syntaxdiagrams.html",
        "toc.html",
    }
)
# LibreOffice's help: the task-oriented guides of five applications, the Options dialog's pages
# and the chart pages.
LIBREOFFICE = (
    "scalc/guide",
    "swriter/guide",
    "simpress/guide",
    "sdraw/guide",
    "shared/guide",
    "shared/optionen",
    "schart/01",
)

# A translated page: at least this share of its text blocks hold Chinese characters.
MIN_TRANSLATED_BLOCKS = 0.5
MIN_BLOCK_LETTERS = 8
_DROPPED = re.compile(r"(?is)<(script|style|head|header|aside|nav)\b.*?</\1\s*>")
_BLOCK = re.compile(r"(?is)<(p|li|td|th|dt|dd|h[1-6]|pre)\b[^>]*>(.*?)</\1\s*>")
_TAG = re.compile(r"<[^>]+>")
_NOT_LETTER = re.compile(r"[\W\d_]+")
# SQLite's syntax diagrams: inline SVG whose words (one per box) are drawing, not prose.
_SVG = re.compile(rb"(?is)<svg\b.*?</svg\s*>")


# --- rendering ------------------------------------------------------------------------------


def translated_share(data: bytes) -> float | None:
    """The share of an HTML page's text blocks that hold Chinese characters (None: no block)."""
    text = _DROPPED.sub(" ", data.decode("utf-8", errors="replace"))
    blocks = [_TAG.sub("", m.group(2)) for m in _BLOCK.finditer(text)]
    blocks = [b for b in blocks if len(_NOT_LETTER.sub("", b)) >= MIN_BLOCK_LETTERS]
    if not blocks:
        return None
    return sum(1 for b in blocks if CJK.search(b)) / len(blocks)


def translated(data: bytes) -> bytes | None:
    """`data` when it is a translated Chinese page, None when it is mostly English fallback."""
    share = translated_share(data)
    return data if share is not None and share >= MIN_TRANSLATED_BLOCKS else None


def translated_html(path: Path) -> bytes | None:
    return translated(path.read_bytes())


def without_svg(path: Path) -> bytes | None:
    return _SVG.sub(b" ", path.read_bytes())


@functools.cache
def _help(directory: Path) -> mallard.Help:
    return mallard.Help.load(directory)


def mallard_page(lang: str) -> Callable[[Path], bytes | None]:
    """A renderer of one Mallard page to HTML; for Chinese, only a translated page."""

    def render(path: Path) -> bytes | None:
        help_ = _help(path.parent)
        page_id = help_.files[path.name]
        data = mallard.render(help_, page_id, "zh-CN" if lang == "zh" else "en").encode()
        return translated(data) if lang == "zh" else data

    return render


# --- selection ------------------------------------------------------------------------------


def _files(root: Path, pattern: str) -> list[Path]:
    """Regular files (not symlinks) matching `pattern`, in a stable order."""
    return sorted(p for p in root.glob(pattern) if p.is_file() and not p.is_symlink())


def select(roots: dict[str, Path]) -> Iterator[Doc]:
    """Every document of the corpus. Keys are short, stable and unique: `en/...` or `zh/...`."""
    ig = roots["installation-guide-amd64"] / "usr/share/doc/installation-guide-amd64"
    for p in _files(ig, "en/*.html"):
        yield Doc(f"en/install/{p.name}", "en", "installation-guide-amd64", p, copy_bytes)
    for p in _files(ig, "zh_CN/*.html"):
        yield Doc(f"zh/install/{p.name}", "zh", "installation-guide-amd64", p, translated_html)

    for package, helps in MALLARD.items():
        share = roots[package] / "usr/share/help"
        for directory, name in helps:
            for p in _files(share, f"C/{directory}/*.page"):
                key = f"en/{name}/{p.stem}.html"
                yield Doc(key, "en", package, p, mallard_page("en"))
            for p in _files(share, f"zh_CN/{directory}/*.page"):
                key = f"zh/{name}/{p.stem}.html"
                yield Doc(key, "zh", package, p, mallard_page("zh"))

    mg = roots["maint-guide"] / "usr/share/doc/maint-guide/html"
    for p in _files(mg, "*.en.html"):
        key = f"en/maint-guide/{p.name.removesuffix('.en.html')}.html"
        yield Doc(key, "en", "maint-guide", p, copy_bytes)
    mgz = roots["maint-guide-zh-cn"] / "usr/share/doc/maint-guide-zh-cn/html"
    for p in _files(mgz, "*.zh-cn.html"):
        key = f"zh/maint-guide/{p.name.removesuffix('.zh-cn.html')}.html"
        yield Doc(key, "zh", "maint-guide-zh-cn", p, translated_html)

    sq = roots["sqlite3-doc"] / "usr/share/doc/sqlite3"
    for p in _files(sq, "*.html"):
        if p.name not in SQLITE_SKIP:
            yield Doc(f"en/sqlite/{p.name}", "en", "sqlite3-doc", p, without_svg)
    for p in _files(sq, "c3ref/*.html"):
        yield Doc(f"en/sqlite/c3ref/{p.name}", "en", "sqlite3-doc", p, without_svg)

    ap = roots["apache2-doc"] / "usr/share/doc/apache2-doc/manual/en"
    for p in _files(ap, "**/*.html"):
        key = f"en/apache/{p.relative_to(ap).as_posix()}"
        yield Doc(key, "en", "apache2-doc", p, copy_bytes)

    lo = roots["libreoffice-help-zh-cn"] / "usr/share/libreoffice/help/zh-CN/text"
    for sub in LIBREOFFICE:
        for p in _files(lo, f"{sub}/*.html"):
            key = f"zh/libreoffice/{sub}/{p.name}"
            yield Doc(key, "zh", "libreoffice-help-zh-cn", p, translated_html)


# --- build ----------------------------------------------------------------------------------


def build() -> list[dict[str, object]]:
    """Download, unpack, select and write; returns the manifest."""
    roots, versions = fetch(PACKAGES, debs=DEBS, unpacked=UNPACKED)
    return write_corpus(list(select(roots)), versions, corpus=CORPUS, versions_file=VERSIONS)


def check(questions: Path = NATURAL, manifest: Path = MANIFEST) -> int:
    """natural.jsonl against this corpus's manifest, with this set's minimum per kind."""
    return check_natural.check(questions, manifest, minimum=MINIMUM)


# The least number of questions of each kind corpus 2's set was written to hold (issue 38).
MINIMUM: dict[str, int] = {
    "en-paraphrase": 45,
    "en-fact": 25,
    "zh-paraphrase": 30,
    "zh-to-en": 30,
    "en-to-zh": 25,
}


def ensure_corpus(directory: Path = CORPUS) -> None:
    """Build this corpus (`python -m bench.quality2.corpus`) when its manifest is missing."""
    from bench.quality.corpus import ensure_corpus as ensure

    ensure(directory, default=CORPUS, module="bench.quality2.corpus")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check natural.jsonl")
    parser.add_argument("--estimate", action="store_true", help="estimate chunks (slower)")
    a = parser.parse_args(argv)
    if a.check:
        return check()
    started = time.monotonic()
    manifest = build()
    report(manifest, CORPUS)
    if a.estimate:
        for lang, n in sorted(estimate_chunks(manifest, CORPUS).items()):
            print(f"  {lang}  ~{n} chunks")
    print(f"built in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
