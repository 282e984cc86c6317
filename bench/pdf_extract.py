"""`python -m bench.pdf_extract DIR [--pages N]`: PDF text extraction, library against library.

For every PDF under DIR and every installed library (pypdf, pypdfium2, pdfminer.six) it extracts
the text of the first N pages and prints a table:

- pages/s — extraction speed (wall clock, opening the file included);
- glued ‰ — per mille of Latin "words" (runs of letters) of 18 letters or more: words run
  together where the library lost the spaces between them;
- cjk-split % — of the places where two CJK characters meet across whitespace or not at all,
  the share with whitespace between them: a sentence broken by spaces or layout line breaks;
- junk ‰ — per mille of characters that are U+FFFD, private-use or control characters
  (undecodable glyphs).

Libraries that are not installed are skipped. Nothing is written.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_WORD_RE = re.compile(r"[^\W\d_" + _CJK + r"]+")
_CJK_PAIR_RE = re.compile(f"(?=([{_CJK}])(\\s*)([{_CJK}]))")
_JUNK_RE = re.compile("[\ufffd\ue000-\uf8ff\x00-\x08\x0b\x0c\x0e-\x1f]")
GLUED_LETTERS = 18

Extractor = Callable[[Path, int], list[str]]


def _pypdf(path: Path, pages: int) -> list[str]:
    from pypdf import PdfReader

    reader = PdfReader(path, strict=False)
    return [page.extract_text() for page in reader.pages[:pages]]


def _pypdfium2(path: Path, pages: int) -> list[str]:
    import pypdfium2

    document = pypdfium2.PdfDocument(path)
    try:
        texts = []
        for index in range(min(pages, len(document))):
            page = document[index]
            textpage = page.get_textpage()
            texts.append(textpage.get_text_bounded())
            textpage.close()
            page.close()
        return texts
    finally:
        document.close()


def _pdfminer(path: Path, pages: int) -> list[str]:
    from pdfminer.high_level import extract_text

    return extract_text(str(path), maxpages=pages).split("\f")


def _available() -> dict[str, Extractor]:
    found: dict[str, Extractor] = {}
    for name, module, extractor in (
        ("pypdf", "pypdf", _pypdf),
        ("pypdfium2", "pypdfium2", _pypdfium2),
        ("pdfminer.six", "pdfminer", _pdfminer),
    ):
        try:
            __import__(module)
        except ImportError:
            continue
        found[name] = extractor
    return found


def quality(text: str) -> tuple[float, float | None, float]:
    """(glued words per mille, CJK pairs split by whitespace in % or None, junk per mille)."""
    words = _WORD_RE.findall(text)
    latin = [w for w in words if w.isascii()]
    glued = sum(len(w) >= GLUED_LETTERS for w in latin) * 1000 / max(len(latin), 1)
    pairs = _CJK_PAIR_RE.findall(text)
    split = 100 * sum(bool(gap) for _, gap, _ in pairs) / len(pairs) if len(pairs) > 50 else None
    junk = len(_JUNK_RE.findall(text)) * 1000 / max(len(text), 1)
    return glued, split, junk


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--pages", type=int, default=40, help="pages per file (default 40)")
    args = parser.parse_args()
    files = sorted(args.directory.rglob("*.pdf"))
    libraries = _available()
    if not files or not libraries:
        print("no PDF files or no PDF library found", file=sys.stderr)
        return 1
    header = f"{'file':<30} {'library':<13} {'pages/s':>8} {'glued ‰':>8} {'cjk-split %':>11} "
    print(header + f"{'junk ‰':>7}")
    totals: dict[str, list[float]] = {name: [0.0, 0.0] for name in libraries}
    for path in files:
        for name, extract in libraries.items():
            started = time.perf_counter()
            try:
                pages = extract(path, args.pages)
            except Exception as exc:
                print(f"{path.name[:30]:<30} {name:<13} failed: {type(exc).__name__}: {exc}")
                continue
            elapsed = time.perf_counter() - started
            totals[name][0] += len(pages)
            totals[name][1] += elapsed
            glued, split, junk = quality("\n".join(pages))
            split_text = "-" if split is None else f"{split:.1f}"
            print(
                f"{path.name[:30]:<30} {name:<13} {len(pages) / elapsed:>8.1f} {glued:>8.2f} "
                f"{split_text:>11} {junk:>7.2f}"
            )
    for name, (page_count, seconds) in totals.items():
        print(f"{'all files':<30} {name:<13} {page_count / max(seconds, 1e-9):>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
