"""`python -m bench.ocr_scans [--pages 8] [--seed 37] [--directions canon stock]`: OCR's
character error rate on scan-like renders of real pages, English and Chinese, upright and
upside down.

The pages are the Debian New Maintainers' Guide's (Debian 12's `maint-guide` and
`maint-guide-zh-cn`: the same manual written in each language; `apt-get download` into
`.data/ocr/`, nothing committed; the Debian Reference is kept for independent checks and is not
used here), `--pages` body pages per language spread evenly through
the book (pages with under 600 characters of text, or a table of contents' dot leaders, are
passed over). Each page is rendered at 150 dpi in grey by PDFium (what `pdftoppm -r 150 -gray`
gives), then made to look scanned, the same way for every run (`--seed`): ink a little grey on
a paper tone with a faint shading, turned by up to 0.7 degrees, blurred (radius 0.6), grain
(sigma 7) and a JPEG at quality 70. The same page turned upside down (a sheet fed the wrong way
round) is read too.

The reference is the page's text layer. CER is the edit distance (Levenshtein, characters)
between it and what OCR read, over the reference's length, both NFKC-normalised, typographic
quotes and dashes folded to ASCII, and every space removed (Chinese has none, and OCR's spaces
between Latin words differ from PDFium's), for all the pages of a language together. Reading
order counts: a table's cells read in another order than the text layer's cost edits (most of
what is left in English), as they would cost a reader.

`--directions`: `canon` is Canon's path (`textkit.extract.ocr.recognise`: its direction
classifier asked about lines in pieces, page orientation, reading order and paragraphs);
`stock` is the same with rapidocr's own use of the classifier (a whole line squeezed into its
48 x 192 input, a line turned when it is 90 % sure) — what Canon did before issue 37. s/page is
the wall clock of the OCR of a page (1 thread), CPU s/page the process's CPU time for it (what
holds on a busy machine).
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import time
import unicodedata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".data" / "ocr"
DEBS = DATA / "debs"
UNPACKED = DATA / "unpacked"
# Debian 12's packages: the figures in docs/BENCHMARKS.md were measured on these.
PACKAGES = {"en": "maint-guide", "zh": "maint-guide-zh-cn"}
PDFS = {
    "en": "usr/share/doc/maint-guide/maint-guide.en.pdf",
    "zh": "usr/share/doc/maint-guide-zh-cn/maint-guide.zh-cn.pdf",
}
DPI = 150
MIN_CHARS = 600


def unpacked(package: str) -> Path:
    """The package's files, downloaded with apt-get and unpacked under .data/ocr/ once."""
    root = UNPACKED / package
    if root.is_dir():
        return root
    DEBS.mkdir(parents=True, exist_ok=True)
    debs = sorted(DEBS.glob(f"{package}_*.deb"))
    if not debs:
        got = subprocess.run(
            ["apt-get", "download", package], cwd=DEBS, capture_output=True, text=True
        )
        debs = sorted(DEBS.glob(f"{package}_*.deb"))
        if got.returncode != 0 or not debs:
            sys.exit(f"apt-get download {package} failed: {got.stderr.strip()}")
    subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(root)], check=True)
    return root


def body_pages(path: Path, count: int) -> list[tuple[int, str]]:
    """`count` pages spread evenly through the book's body: (index, text layer)."""
    import pypdfium2

    document = pypdfium2.PdfDocument(path)
    try:
        texts = []
        for index in range(len(document)):
            page = document[index]
            textpage = page.get_textpage()
            texts.append(textpage.get_text_bounded())
            textpage.close()
            page.close()
    finally:
        document.close()
    usable = [
        index
        for index, text in enumerate(texts)
        if len("".join(text.split())) >= MIN_CHARS and ". . . . ." not in text
    ]
    step = len(usable) / count
    chosen = [usable[int(step * (k + 0.5))] for k in range(count)]
    return [(index, texts[index]) for index in chosen]


def render(path: Path, index: int) -> Any:
    import pypdfium2

    document = pypdfium2.PdfDocument(path)
    try:
        page = document[index]
        bitmap = page.render(scale=DPI / 72, grayscale=True)
        image = bitmap.to_pil().copy()
        bitmap.close()
        page.close()
        return image
    finally:
        document.close()


def scanned(image: Any, seed: int) -> Any:
    """The page as a scanner would give it back (deterministic for a seed)."""
    import numpy as np
    from PIL import Image, ImageFilter

    rng = np.random.default_rng(seed)
    pixels = np.asarray(image.convert("L"), dtype=np.float32)
    height, width = pixels.shape
    paper = 236 + 8 * np.linspace(-1, 1, width)[None, :] * rng.uniform(-1, 1)
    ink = 28.0
    toned = paper - (255 - pixels) / 255 * (paper - ink)
    page = Image.fromarray(np.clip(toned, 0, 255).astype(np.uint8))
    page = page.rotate(
        rng.uniform(-0.7, 0.7), resample=Image.Resampling.BICUBIC, fillcolor=int(paper.mean())
    )
    page = page.filter(ImageFilter.GaussianBlur(0.6))
    grain = rng.normal(0, 7, (height, width))
    page = Image.fromarray(
        np.clip(np.asarray(page, dtype=np.float32) + grain, 0, 255).astype(np.uint8)
    )
    out = io.BytesIO()
    page.save(out, format="JPEG", quality=70)
    return Image.open(io.BytesIO(out.getvalue())).convert("L")


# Typographic quotes and dashes (the manual's ” for both ends of a quotation) read as their
# ASCII forms are the same text to a reader and to search: not counted as errors.
_FOLD = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u2013": "-",
        "\u2014": "-",
    }
)


def squeezed(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).translate(_FOLD).split())


def levenshtein(a: str, b: str) -> int:
    """Edit distance by Hyyrö's bit-parallel algorithm (Python's integers as bit vectors):
    a page of 3,000 characters in milliseconds."""
    if not a:
        return len(b)
    peq: dict[str, int] = {}
    for i, char in enumerate(a):
        peq[char] = peq.get(char, 0) | (1 << i)
    mask = (1 << len(a)) - 1
    high = 1 << (len(a) - 1)
    pv, mv, score = mask, 0, len(a)
    for char in b:
        eq = peq.get(char, 0)
        xv = eq | mv
        xh = (((eq & pv) + pv) ^ pv) | eq
        ph = mv | (~(xh | pv) & mask)
        mh = pv & xh
        if ph & high:
            score += 1
        elif mh & high:
            score -= 1
        ph = ((ph << 1) | 1) & mask
        mh = (mh << 1) & mask
        pv = mh | (~(xv | ph) & mask)
        mv = ph & xv
    return score


def read(image: Any) -> tuple[str, float, float]:
    """What OCR reads on the page, its wall-clock and CPU seconds."""
    from textkit.extract import ocr

    started, cpu = time.perf_counter(), time.process_time()
    text = "\n".join(p.text for p in ocr.recognise(image))
    return text, time.perf_counter() - started, time.process_time() - cpu


_CANON_DIRECTION: Any = None


def use_direction(kind: str) -> None:
    """Canon's direction step, or rapidocr's own classifier in its place (rapidocr's never
    turns a page: `recognise` then reads the page as it lies)."""
    global _CANON_DIRECTION
    from textkit.extract import ocr

    ocr.preload(1)
    engine = ocr._ENGINE
    if _CANON_DIRECTION is None:
        _CANON_DIRECTION = engine.text_cls
    engine.text_cls = _CANON_DIRECTION if kind == "canon" else _CANON_DIRECTION.classifier


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--directions", nargs="+", default=["canon", "stock"])
    parser.add_argument("--save", type=Path, help="write the scanned pages here (PNG)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))

    pages: list[tuple[str, int, str, Any]] = []
    for lang, package in PACKAGES.items():
        pdf = unpacked(package) / PDFS[lang]
        for index, text in body_pages(pdf, args.pages):
            image = scanned(render(pdf, index), seed=args.seed * 1000 + index)
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                image.save(args.save / f"{lang}-p{index + 1}.png")
            pages.append((lang, index, text, image))
    print(f"{len(pages)} pages at {DPI} dpi, seed {args.seed}")
    print(
        "| direction | language | pages | characters | CER upright | CER upside down "
        "| s/page | CPU s/page |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for direction in args.directions:
        use_direction(direction)
        for lang in PACKAGES:
            mine = [page for page in pages if page[0] == lang]
            chars = sum(len(squeezed(text)) for _, _, text, _ in mine)
            errors = {"upright": 0, "upside down": 0}
            seconds, cpu = [], []
            for _, index, text, image in mine:
                for way, picture in (("upright", image), ("upside down", image.rotate(180))):
                    found, took, used = read(picture)
                    seconds.append(took)
                    cpu.append(used)
                    edits = levenshtein(squeezed(text), squeezed(found))
                    errors[way] += edits
                    cer = edits / max(1, len(squeezed(text)))
                    print(f"  {direction} {lang} p{index + 1} {way}: {cer:.3f}", file=sys.stderr)
            print(
                f"| {direction} | {lang} | {len(mine)} | {chars:,} | "
                f"{errors['upright'] / chars:.3f} | {errors['upside down'] / chars:.3f} | "
                f"{sum(seconds) / len(seconds):.1f} | {sum(cpu) / len(cpu):.1f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
