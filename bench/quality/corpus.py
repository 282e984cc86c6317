"""Build the retrieval-quality corpus from Debian documentation packages, or check the questions.

    python -m bench.quality.corpus            # download, unpack, select, write corpus + manifest
    python -m bench.quality.corpus --check    # every answer key exists; question counts
    python -m bench.quality.corpus --estimate # also estimate chunks with Canon's own parsers

Real documents (English and Chinese HTML, plain text, PDF) rather than generated text, so that
recall numbers mean something. The result is a pure function of the package versions (and of
groff's, which renders the Chinese man pages): nothing here depends on the clock, the locale or
directory order. Everything downloaded lives under `.data/quality/` and stays out of git.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
DATA = ROOT / ".data" / "quality"
DEBS = DATA / "debs"
UNPACKED = DATA / "unpacked"
CORPUS = DATA / "corpus"
MANIFEST = CORPUS / "manifest.json"
VERSIONS = DATA / "packages.json"
QUESTIONS = Path(__file__).resolve().parent / "questions.jsonl"

# The versions the questions were written against (Debian 12). A newer version still builds, with
# a warning: a page may have moved and an answer key may then be missing (`--check` says so).
PACKAGES: dict[str, str] = {
    "python3.11-doc": "3.11.2-6+deb12u9",
    "python-django-doc": "3:3.2.25-0+deb12u7",
    "git-doc": "1:2.39.5-0+deb12u3",
    "bash-doc": "5.2.15-2",
    "debian-handbook": "11.20220922",
    "manpages-zh": "1.6.4.0-1",
    "kicad-doc-zh": "6.0.11+dfsg-1",
    "texlive-lang-chinese": "2022.20230122-1",
}

MEDIA_TYPES = {".html": "text/html", ".txt": "text/plain", ".pdf": "application/pdf"}

# Chinese PDFs whose text pypdf extracts as real characters; others in the package (lshort-zh-cn,
# tlmgr-intro-zh-cn, install-latex-guide-zh-cn) use fonts without a Unicode map and extract to
# mojibake, which would only measure the PDF's fonts.
TEXLIVE_PDFS = (
    "latex/ctex-faq/ctex-faq.pdf",
    "texlive/texlive-zh-cn/texlive-zh-cn.pdf",
    "generic/latex-notes-zh-cn/latex-notes-zh-cn.pdf",
    "support/asymptote-faq-zh-cn/asymptote-faq-zh-cn.pdf",
    "support/asymptote-manual-zh-cn/asymptote-manual-zh-cn.pdf",
)
MAN_SECTIONS = ("man1", "man5", "man8")
# A translated page below this share of CJK characters is an untranslated English fallback.
MIN_CJK_SHARE = 0.05
CJK = re.compile(r"[\u3400-\u9fff]")


@dataclass(frozen=True)
class Doc:
    """One selected document: where it comes from and how to turn it into corpus bytes."""

    key: str
    lang: str
    package: str
    source: Path
    render: Callable[[Path], bytes | None]


# --- packages -------------------------------------------------------------------------------


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, check=False, capture_output=True, text=True)


def _deb_field(deb: Path, field: str) -> str:
    return _run(["dpkg-deb", "-f", str(deb), field]).stdout.strip()


def _find_deb(package: str, pinned: str, debs: Path) -> Path | None:
    """The downloaded .deb of `package`, preferring the pinned version when several are present."""
    found = sorted(p for p in debs.glob(f"{package}_*.deb") if _deb_field(p, "Package") == package)
    for deb in found:
        if _deb_field(deb, "Version") == pinned:
            return deb
    return found[-1] if found else None


def download(package: str, pinned: str | None = None, *, debs: Path = DEBS) -> Path:
    """apt-get download into `debs` unless already there; refresh the lists only if that fails.
    `pinned` (PACKAGES' version by default) is the version the questions were written for."""
    pinned = pinned or PACKAGES[package]
    debs.mkdir(parents=True, exist_ok=True)
    deb = _find_deb(package, pinned, debs)
    if deb is None:
        result = _run(["apt-get", "download", package], cwd=debs)
        if result.returncode != 0:
            _run(["apt-get", "update"])
            result = _run(["apt-get", "download", package], cwd=debs)
        deb = _find_deb(package, pinned, debs)
        if result.returncode != 0 or deb is None:
            sys.exit(f"apt-get download {package} failed: {result.stderr.strip()}")
    version = _deb_field(deb, "Version")
    if version != pinned:
        print(f"warning: {package} is {version}, questions were written for {pinned}")
    return deb


def unpack(package: str, deb: Path, *, into: Path = UNPACKED) -> Path:
    """dpkg-deb -x into `into`/<package>, redone only when the .deb changes."""
    target = into / package
    stamp = target / ".from-deb"
    if stamp.exists() and stamp.read_text() == deb.name:
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    result = _run(["dpkg-deb", "-x", str(deb), str(target)])
    if result.returncode != 0:
        sys.exit(f"dpkg-deb -x {deb.name} failed: {result.stderr.strip()}")
    stamp.write_text(deb.name)
    return target


# --- rendering ------------------------------------------------------------------------------


def copy_bytes(path: Path) -> bytes | None:
    return path.read_bytes()


def _html_text(data: bytes) -> str:
    """Rough visible text of an HTML page: enough to tell Chinese from English."""
    text = data.decode("utf-8", errors="replace")
    text = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", text)
    return re.sub(r"<[^>]+>", " ", text)


def translated_html(path: Path) -> bytes | None:
    """A zh page, or None when the translation fell back to English."""
    data = path.read_bytes()
    text = re.sub(r"\s+", "", _html_text(data))
    if not text or len(CJK.findall(text)) / len(text) < MIN_CJK_SHARE:
        return None
    return data


def _man_source(path: Path) -> str | None:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("gb18030", errors="replace")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(('.\\"', "'\\\""))]
    if not lines or lines[0].startswith(".so "):
        return None  # a link to another page, which is selected on its own
    # The Chinese man pages of PostgreSQL's commands are a translation of its manual, which is
    # kept out of this corpus for independent checks.
    if "postgres" in text.lower():
        return None
    return text


def man_page(path: Path) -> bytes | None:
    """Render a roff man page to UTF-8 plain text with groff (tables through tbl): left-aligned
    and unhyphenated (CJK text has no spaces, so justification would spray blanks), one
    continuous page, no overstriking, trailing blanks removed."""
    source = _man_source(path)
    if source is None:
        return None
    result = subprocess.run(
        ["groff", "-t", "-Tutf8", "-mandoc", "-Kutf-8", "-P-cbou", "-rLL=160n", "-rcR=1", "-rHY=0"],
        input=(".ad l\n.nh\n" + source).encode(),
        capture_output=True,
        check=False,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"},
    )
    text = result.stdout.decode("utf-8", errors="replace")
    text = "\n".join(line.rstrip() for line in text.splitlines())
    text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
    if result.returncode != 0 or len(text) < 200:
        return None
    return (text + "\n").encode()


# --- selection ------------------------------------------------------------------------------


def _files(root: Path, pattern: str) -> list[Path]:
    """Regular files (not symlinks) matching `pattern`, in a stable order."""
    return sorted(p for p in root.glob(pattern) if p.is_file() and not p.is_symlink())


def select(roots: dict[str, Path]) -> Iterator[Doc]:
    """Every document of the corpus. Keys are short, stable and unique."""
    py = roots["python3.11-doc"] / "usr/share/doc/python3.11/html"
    for sub in ("library", "tutorial", "howto", "faq"):
        for p in _files(py, f"{sub}/*.html"):
            yield Doc(f"en/python/{sub}/{p.name}", "en", "python3.11-doc", p, copy_bytes)

    dj = roots["python-django-doc"] / "usr/share/doc/python-django-doc/html"
    for sub in ("intro", "topics", "howto", "ref", "faq"):
        for p in _files(dj, f"{sub}/**/*.html"):
            key = f"en/django/{p.relative_to(dj).as_posix()}"
            yield Doc(key, "en", "python-django-doc", p, copy_bytes)

    git = roots["git-doc"] / "usr/share/doc/git-doc"
    for p in _files(git, "*.html"):
        yield Doc(f"en/git/{p.name}", "en", "git-doc", p, copy_bytes)
    for p in _files(git, "howto/*.txt"):  # plain-text articles, kept as text
        yield Doc(f"en/git/howto/{p.name}", "en", "git-doc", p, copy_bytes)

    bash = roots["bash-doc"] / "usr/share/doc/bash"
    for name in ("bash.pdf", "bashref.pdf"):
        yield Doc(f"en/bash/{name}", "en", "bash-doc", bash / name, copy_bytes)

    hb = roots["debian-handbook"] / "usr/share/doc/debian-handbook/html"
    for p in _files(hb, "en-US/*.html"):
        yield Doc(f"en/debian-handbook/{p.name}", "en", "debian-handbook", p, copy_bytes)
    for p in _files(hb, "zh-CN/*.html"):
        yield Doc(f"zh/debian-handbook/{p.name}", "zh", "debian-handbook", p, translated_html)

    man = roots["manpages-zh"] / "usr/share/man/zh_CN"
    for sec in MAN_SECTIONS:
        for p in _files(man, f"{sec}/*.gz"):
            name = p.name.removesuffix(".gz")
            yield Doc(f"zh/man/{name}.txt", "zh", "manpages-zh", p, man_page)

    kicad = roots["kicad-doc-zh"] / "usr/share/doc/kicad/help/zh"
    for p in _files(kicad, "*.html"):
        yield Doc(f"zh/kicad/{p.name}", "zh", "kicad-doc-zh", p, translated_html)

    tex = roots["texlive-lang-chinese"] / "usr/share/doc/texlive-doc"
    for rel in TEXLIVE_PDFS:
        p = tex / rel
        yield Doc(f"zh/texlive/{p.name}", "zh", "texlive-lang-chinese", p, copy_bytes)


# --- build ----------------------------------------------------------------------------------


def _write_if_changed(path: Path, data: bytes) -> None:
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def fetch(
    packages: dict[str, str], *, debs: Path = DEBS, unpacked: Path = UNPACKED
) -> tuple[dict[str, Path], dict[str, str]]:
    """Download and unpack every package: its unpacked root and the version it really is."""
    roots: dict[str, Path] = {}
    versions: dict[str, str] = {}
    for package, pinned in packages.items():
        deb = download(package, pinned, debs=debs)
        roots[package] = unpack(package, deb, into=unpacked)
        versions[package] = _deb_field(deb, "Version")
    return roots, versions


def build() -> list[dict[str, object]]:
    """Download, unpack, select and write; returns the manifest."""
    roots, versions = fetch(PACKAGES)
    return write_corpus(list(select(roots)), versions, corpus=CORPUS, versions_file=VERSIONS)


def write_corpus(
    docs: list[Doc], versions: dict[str, str], *, corpus: Path, versions_file: Path
) -> list[dict[str, object]]:
    """Render every document into `corpus` (in parallel; a render that gives None leaves the
    document out), write manifest.json and the package versions, remove files of documents no
    longer selected; returns the manifest, sorted by key. Writes only what changed."""
    manifest_path = corpus / "manifest.json"
    keys = Counter(d.key for d in docs)
    duplicates = [k for k, n in keys.items() if n > 1]
    if duplicates:
        sys.exit(f"duplicate keys: {duplicates[:5]}")

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        rendered = list(pool.map(lambda d: d.render(d.source), docs))

    manifest: list[dict[str, object]] = []
    kept: set[Path] = {manifest_path}
    for doc, data in zip(docs, rendered, strict=True):
        if data is None:
            continue
        path = corpus / doc.key
        _write_if_changed(path, data)
        kept.add(path)
        manifest.append(
            {
                "key": doc.key,
                "lang": doc.lang,
                "media_type": MEDIA_TYPES[Path(doc.key).suffix],
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "source_package": doc.package,
            }
        )
    for stale in sorted(p for p in corpus.rglob("*") if p.is_file() and p not in kept):
        stale.unlink()
    manifest.sort(key=lambda m: str(m["key"]))
    _write_if_changed(
        manifest_path, (json.dumps(manifest, ensure_ascii=False, indent=1) + "\n").encode()
    )
    _write_if_changed(
        versions_file, (json.dumps(versions, indent=1, sort_keys=True) + "\n").encode()
    )
    return manifest


def estimate_chunks(manifest: list[dict[str, object]], corpus: Path = CORPUS) -> Counter[str]:
    """Characters Canon's own parsers extract, per language, as chunks of ~700 new characters."""
    sys.path.insert(0, str(ROOT))
    import logging

    from textkit.extract import extract

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    chars: Counter[str] = Counter()
    for m in manifest:
        text = extract(corpus / str(m["key"]), str(m["media_type"])).text()
        chars[str(m["lang"])] += len(text)
    return Counter({lang: n // 700 for lang, n in chars.items()})


def report(manifest: list[dict[str, object]], corpus: Path = CORPUS) -> None:
    by = Counter((str(m["lang"]), str(m["media_type"])) for m in manifest)
    size: Counter[str] = Counter()
    for m in manifest:
        size[str(m["lang"])] += int(str(m["bytes"]))
    print(f"{len(manifest)} documents in {corpus}")
    for (lang, media), n in sorted(by.items()):
        print(f"  {lang}  {media:<16} {n:5}")
    for lang, n in sorted(size.items()):
        print(f"  {lang}  {n / 1e6:.1f} MB")


# --- questions ------------------------------------------------------------------------------


def check() -> int:
    """Every question is well formed and every answer key exists in the manifest."""
    if not MANIFEST.exists():
        print(f"no manifest at {MANIFEST}: run `python -m bench.quality.corpus` first")
        return 1
    manifest = {str(m["key"]): m for m in json.loads(MANIFEST.read_text())}
    problems: list[str] = []
    ids: set[str] = set()
    counts: Counter[str] = Counter()
    for n, line in enumerate(QUESTIONS.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        q = json.loads(line)
        qid = q.get("id", f"line {n}")
        if set(q) != {"id", "lang", "question", "answers", "where"}:
            problems.append(f"{qid}: fields {sorted(q)}")
        if qid in ids:
            problems.append(f"{qid}: duplicate id")
        ids.add(qid)
        if q.get("lang") not in ("en", "zh") or not str(qid).startswith(f"{q.get('lang')}-"):
            problems.append(f"{qid}: lang {q.get('lang')!r}")
        if not q.get("question") or not q.get("answers"):
            problems.append(f"{qid}: empty question or answers")
        for key in q.get("answers", []):
            if key not in manifest:
                problems.append(f"{qid}: answer {key} is not in the manifest")
        counts[q.get("lang")] += 1
    for lang, n in sorted(counts.items()):
        print(f"{lang}: {n} questions")
    for p in problems:
        print(f"problem: {p}")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check questions.jsonl")
    parser.add_argument("--estimate", action="store_true", help="estimate chunks (slower)")
    a = parser.parse_args()
    if a.check:
        return check()
    started = time.monotonic()
    manifest = build()
    report(manifest)
    if a.estimate:
        for lang, n in sorted(estimate_chunks(manifest).items()):
            print(f"  {lang}  ~{n} chunks")
    print(f"built in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


# --- loading the corpus and its questions for a run (bench.quality.run) -------------------


@dataclass
class Corpus:
    directory: Path
    documents: list[dict[str, Any]]
    questions: list[dict[str, Any]]
    dropped_questions: int = 0
    notes: list[str] = field(default_factory=list)


def ensure_corpus(
    directory: Path, *, default: Path = CORPUS, module: str = "bench.quality.corpus"
) -> None:
    """Build the Debian corpus (`python -m <module>`) when its manifest is missing and
    `directory` is the one that module writes (`default`)."""
    if (directory / "manifest.json").exists():
        return
    if directory.resolve() != default.resolve():
        raise SystemExit(f"no manifest.json in {directory}")
    print(f"[B8] corpus missing: running python -m {module}", flush=True)
    subprocess.run([sys.executable, "-m", module], cwd=ROOT, check=True)
    if not (directory / "manifest.json").exists():
        raise SystemExit(f"bench.quality.corpus wrote no {directory / 'manifest.json'}")


def load_corpus(
    directory: Path,
    question_sets: Path | dict[str, Path],
    *,
    limit_docs: int | None,
    limit_questions: int | None,
) -> Corpus:
    """The manifest's documents and the questions of every set (a path alone is the set
    "keyword"), each question tagged with its set (`set`); `limit_questions` applies per set."""
    manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    if isinstance(question_sets, Path):
        question_sets = {"keyword": question_sets}
    questions: list[dict[str, Any]] = []
    for name, path in question_sets.items():
        loaded = [
            {**json.loads(line), "set": name}
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        if limit_questions:
            loaded = _interleave_languages(loaded)[:limit_questions]
        questions.extend(loaded)
    by_key = {d["key"]: d for d in manifest}
    notes: list[str] = []
    unknown = sorted({a for q in questions for a in q["answers"] if a not in by_key})
    if unknown:
        notes.append(f"{len(unknown)} answer keys not in the manifest: {unknown[:5]}")
    if limit_docs and limit_docs < len(manifest):
        # The questions' answer documents first (languages interleaved), then the rest.
        chosen: dict[str, None] = {}
        for q in _interleave_languages(questions):
            for a in q["answers"]:
                if a in by_key and len(chosen) < limit_docs:
                    chosen.setdefault(a)
        for d in manifest:
            if len(chosen) >= limit_docs:
                break
            chosen.setdefault(d["key"])
        manifest = [by_key[k] for k in chosen]
    keys = {d["key"] for d in manifest}
    kept = []
    for q in questions:
        answers = [a for a in q["answers"] if a in keys]
        if answers:
            kept.append({**q, "answers": answers})
    return Corpus(
        directory=directory,
        documents=manifest,
        questions=kept,
        dropped_questions=len(questions) - len(kept),
        notes=notes,
    )


def _interleave_languages(questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_lang: dict[str, list[dict[str, Any]]] = {}
    for q in questions:
        by_lang.setdefault(q["lang"], []).append(q)
    out: list[dict[str, Any]] = []
    for i in range(max((len(v) for v in by_lang.values()), default=0)):
        out.extend(v[i] for v in by_lang.values() if i < len(v))
    return out
