"""OCR: the text of a picture of a page, for images and for PDF pages without a text layer.

The engine is RapidOCR (`rapidocr` 3.10): PP-OCRv6 small detection and recognition and the
PP-OCR direction classifier as ONNX models shipped inside its wheel, run by onnxruntime on the
CPU. The models are named by path (`_MODELS`), so nothing is ever downloaded. The recognition
model is PaddleOCR's "ch" model, which reads simplified and traditional Chinese and Latin script
(English, digits, punctuation) in one pass, so no language is chosen. Chosen over
`rapidocr-onnxruntime` 1.4.4 (PP-OCRv4) and Tesseract 5 by the figures in docs/BENCHMARKS.md
("OCR"): more characters right in both languages for less CPU.

One engine per process, created on first use (importing onnxruntime and OpenCV and loading the
models takes a second or two), with onnxruntime's threads bounded
(`OcrOptions.threads`, CANON_OCR_THREADS) and OpenCV's own pool turned down to the same, so a
worker child doing OCR uses the cores it was given and no more. Calls are serialised per
process.

The engine returns lines as boxes; `recognise` puts them into reading order — top to bottom,
and by column when the page has two (a vertical gutter with text on both sides; lines crossing
it, such as a title, cut the columns into bands) — joins pieces of one line, and groups lines
into paragraphs where the gap between lines, or the size of the type, changes.

Limits per document (`DocumentOcr`): pages to OCR (checked before the first), seconds of OCR
(checked before each page, so a document stops at most one page past it) and, for images,
pixels (checked from the header, before decoding). A document past a limit fails with a
sentence naming it rather than being indexed in part: a published document that is silently
missing its last pages is worse than a failed build that says why.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textkit.extract import cleanup, progress
from textkit.extract.base import ParseError

if TYPE_CHECKING:
    from PIL.Image import Image

# The engine's detector works on the page scaled so its longer side is at most this (and cuts
# the lines it recognises from that scaled page): rendering or decoding larger costs memory and
# time for nothing.
MAX_SIDE = 2000


@dataclass(frozen=True)
class OcrOptions:
    """How OCR runs (the parse stage sets them from Django's settings; these are the defaults).

    `threads` counts onnxruntime's threads in one process; it holds from the engine's creation,
    the first OCR in the process. `min_confidence` drops recognised lines the engine is less
    sure of (0-1)."""

    threads: int = 1
    max_pages: int = 100
    max_seconds: float = 600.0
    max_pixels: int = 50_000_000
    min_confidence: float = 0.5


_DEFAULT_OPTIONS = OcrOptions()
_OPTIONS: ContextVar[OcrOptions | None] = ContextVar("textkit_ocr_options", default=None)


@contextmanager
def configured(options: OcrOptions) -> Iterator[None]:
    """Use `options` for the OCR of extractions run inside the block."""
    token = _OPTIONS.set(options)
    try:
        yield
    finally:
        _OPTIONS.reset(token)


def current_options() -> OcrOptions:
    return _OPTIONS.get() or _DEFAULT_OPTIONS


_ENGINE: Any = None
_ENGINE_LOCK = threading.Lock()
# The models inside the rapidocr wheel: named here, so the engine never looks for (and never
# downloads) any other.
_MODELS = {
    "Det": "PP-OCRv6_det_small.onnx",
    "Cls": "ch_ppocr_mobile_v2.0_cls_mobile.onnx",
    "Rec": "PP-OCRv6_rec_small.onnx",
}


def _engine(threads: int) -> Any:
    """The process's engine, created on first use. Call with `_ENGINE_LOCK` held."""
    global _ENGINE
    if _ENGINE is None:
        import cv2
        import rapidocr
        from rapidocr import RapidOCR

        threads = max(1, threads)
        cv2.setNumThreads(threads)
        models = Path(rapidocr.__file__).parent / "models"
        params: dict[str, Any] = {
            "Global.log_level": "error",
            "Global.max_side_len": MAX_SIDE,
            "EngineConfig.onnxruntime.intra_op_num_threads": threads,
            "EngineConfig.onnxruntime.inter_op_num_threads": 1,
        }
        for step, name in _MODELS.items():
            path = models / name
            if not path.is_file():
                raise RuntimeError(f"the OCR model {path} is missing: reinstall rapidocr")
            params[f"{step}.model_path"] = str(path)
        _ENGINE = RapidOCR(params=params)
    return _ENGINE


@dataclass(frozen=True)
class Line:
    """A recognised line (or piece of one): its text and its box in pixels."""

    text: str
    left: float
    top: float
    right: float
    bottom: float
    height: float

    @property
    def middle(self) -> float:
        return (self.top + self.bottom) / 2


@dataclass(frozen=True)
class Paragraph:
    """Lines of one paragraph joined, their count and their median height in pixels."""

    text: str
    lines: int
    height: float


def check_pixels(width: int, height: int, *, what: str = "The image") -> None:
    limit = current_options().max_pixels
    if width * height > limit:
        raise ParseError(
            f"{what} is {width:,} by {height:,} pixels; the limit for OCR is {limit:,} pixels."
        )


def recognise(image: Image) -> list[Paragraph]:
    """The paragraphs of a picture of a page, in reading order."""
    import numpy as np

    options = current_options()
    if image.mode not in ("L", "RGB"):
        image = image.convert("RGB")
    pixels = np.asarray(image)
    if pixels.ndim == 3:
        pixels = np.ascontiguousarray(pixels[:, :, ::-1])  # the engine reads BGR
    with _ENGINE_LOCK:
        output = _engine(options.threads)(pixels)
    if output.boxes is None or output.txts is None or output.scores is None:
        return []
    found = list(zip(output.boxes, output.txts, output.scores, strict=True))
    return layout(_lines(found, options.min_confidence), image.width)


def _lines(result: list[Any], min_confidence: float) -> list[Line]:
    lines = []
    for box, text, score in result:
        text = " ".join(str(text).split())
        if not text or float(score) < min_confidence:
            continue
        xs = [float(point[0]) for point in box]
        ys = [float(point[1]) for point in box]
        # The box may lean (a skewed scan): its height is that of its left and right edges.
        left_edge = _distance(box[0], box[3])
        right_edge = _distance(box[1], box[2])
        height = max(1.0, (left_edge + right_edge) / 2)
        lines.append(Line(text, min(xs), min(ys), max(xs), max(ys), height))
    return lines


def _distance(a: Any, b: Any) -> float:
    return float(((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5)


def layout(lines: list[Line], page_width: int) -> list[Paragraph]:
    """Reading order and paragraphs, from the lines' boxes alone."""
    paragraphs: list[Paragraph] = []
    for flow in _flows(lines, page_width):
        paragraphs.extend(_paragraphs(_rows(flow)))
    return paragraphs


def _flows(lines: list[Line], page_width: int) -> list[list[Line]]:
    """The page cut into runs of text read one after the other: the whole page, or, when it has
    two columns, bands of left column then right column between lines that cross the gutter."""
    if not lines:
        return []
    gutter = _gutter(lines, page_width)
    ordered = sorted(lines, key=lambda line: (line.top, line.left))
    if gutter is None:
        return [ordered]
    flows: list[list[Line]] = []
    left: list[Line] = []
    right: list[Line] = []
    for line in ordered:
        if line.right <= gutter:
            left.append(line)
        elif line.left >= gutter:
            right.append(line)
        else:
            flows.extend(flow for flow in (left, right) if flow)
            flows.append([line])
            left, right = [], []
    flows.extend(flow for flow in (left, right) if flow)
    return flows


# A gutter is at least this share of the page's text width, with this many lines on each side.
_GUTTER_SHARE = 0.02
_GUTTER_MIN_LINES = 3


def _gutter(lines: list[Line], page_width: int) -> float | None:
    """The x of a vertical gap between two columns in the middle of the text, or None. Lines
    wider than half the text (titles across both columns) do not count."""
    start = min(line.left for line in lines)
    end = max(line.right for line in lines)
    width = end - start
    if width <= 0:
        return None
    narrow = [line for line in lines if line.right - line.left < width * 0.5]
    if len(narrow) < 2 * _GUTTER_MIN_LINES:
        return None
    bins = 200
    covered = [False] * bins
    for line in narrow:
        first = int((line.left - start) / width * (bins - 1))
        last = int((line.right - start) / width * (bins - 1))
        for index in range(max(0, first), min(bins - 1, last) + 1):
            covered[index] = True
    best: tuple[int, int] | None = None
    run_start = None
    for index in range(bins // 4, 3 * bins // 4 + 1):
        if not covered[index]:
            run_start = index if run_start is None else run_start
            if best is None or index - run_start > best[1] - best[0]:
                best = (run_start, index)
        else:
            run_start = None
    if best is None or (best[1] - best[0] + 1) < bins * _GUTTER_SHARE:
        return None
    gutter = start + (best[0] + best[1] + 1) / 2 / (bins - 1) * width
    left = sum(1 for line in narrow if line.right <= gutter)
    right = sum(1 for line in narrow if line.left >= gutter)
    if min(left, right) < _GUTTER_MIN_LINES:
        return None
    return gutter


def _rows(flow: list[Line]) -> list[Line]:
    """Pieces of one line (the engine cuts a line at wide gaps) joined, left to right."""
    rows: list[list[Line]] = []
    for line in sorted(flow, key=lambda line: line.middle):
        row = rows[-1] if rows else None
        if row is not None:
            top = max(piece.top for piece in row)
            bottom = min(piece.bottom for piece in row)
            overlap = min(bottom, line.bottom) - max(top, line.top)
            if overlap >= 0.5 * min(line.height, min(piece.height for piece in row)):
                row.append(line)
                continue
        rows.append([line])
    joined = []
    for row in rows:
        row.sort(key=lambda piece: piece.left)
        text = ""
        for piece in row:
            text = cleanup.join_lines(text, piece.text)
        joined.append(
            Line(
                text,
                min(piece.left for piece in row),
                min(piece.top for piece in row),
                max(piece.right for piece in row),
                max(piece.bottom for piece in row),
                statistics.median(piece.height for piece in row),
            )
        )
    return joined


# A gap between two lines wider than this share of their height starts a paragraph; so does a
# change of height by more than this ratio (a heading and the text under it). A box's height is
# that of the line's ink, so descenders alone change it by up to a third ("desk" against "go").
_PARAGRAPH_GAP = 0.8
_SIZE_CHANGE = 1.5


def _paragraphs(rows: list[Line]) -> list[Paragraph]:
    paragraphs: list[Paragraph] = []
    current: list[Line] = []

    def close() -> None:
        if current:
            text = ""
            for row in current:
                text = cleanup.join_lines(text, row.text)
            heights = [row.height for row in current]
            paragraphs.append(Paragraph(text, len(current), statistics.median(heights)))

    for row in rows:
        if current:
            previous = current[-1]
            smaller = min(previous.height, row.height)
            gap = row.top - previous.bottom
            if gap > _PARAGRAPH_GAP * smaller or max(previous.height, row.height) > (
                _SIZE_CHANGE * smaller
            ):
                close()
                current = []
        current.append(row)
    close()
    return paragraphs


class DocumentOcr:
    """The OCR of one document's pages: the page limit (checked here, before any work), the
    time limit (before each page) and the progress ("OCR page 3/40")."""

    def __init__(self, pages: int) -> None:
        self.options = current_options()
        if pages > self.options.max_pages:
            raise ParseError(
                f"The document has {pages:,} pages that need OCR (pages without a text layer); "
                f"the limit is {self.options.max_pages:,} pages per document."
            )
        self.total = pages
        self.done = 0
        self.started = time.monotonic()

    def page(self, image: Image) -> list[Paragraph]:
        elapsed = time.monotonic() - self.started
        if elapsed > self.options.max_seconds:
            raise ParseError(
                f"OCR took longer than the limit of {self.options.max_seconds:,.0f} seconds per "
                f"document; it had read {self.done} of {self.total} pages. Upload the document "
                "in smaller parts, or with a text layer."
            )
        self.done += 1
        progress.report(f"OCR page {self.done}/{self.total}")
        return recognise(image)
