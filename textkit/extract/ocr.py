"""OCR: the text of a picture of a page, for images and for PDF pages without a text layer.

The engine is RapidOCR (`rapidocr` 3.10): PP-OCRv6 small detection and recognition and the
PP-OCR direction classifier as ONNX models shipped inside its wheel, run by onnxruntime on the
CPU. The models are named by path (`_MODELS`), so nothing is ever downloaded. The recognition
model is PaddleOCR's "ch" model, which reads simplified and traditional Chinese and Latin script
(English, digits, punctuation) in one pass, so no language is chosen. Chosen over
`rapidocr-onnxruntime` 1.4.4 (PP-OCRv4) and Tesseract 5 by the figures in docs/BENCHMARKS.md
("OCR"): more characters right in both languages for less CPU.

One engine per process, its three models loaded together: at a worker child's start where OCR
is on (`preload`, called by ingestion.tasks), else on first use (importing onnxruntime and
OpenCV and loading the models takes a second or two), with onnxruntime's threads bounded
(`OcrOptions.threads`, CANON_OCR_THREADS) and OpenCV's own pool turned down to the same, so a
worker child doing OCR uses the cores it was given and no more. Calls are serialised per
process.

Which way up: the direction classifier is asked about each line in pieces of the shape it was
trained on, and about the page as a whole (`LineDirection`); a page scanned upside down is
read in the right order (its boxes turned with it).

Whether OCR runs at all is `OcrOptions.mode` (a knowledge base's choice, which the parse stage
turns off when the process's switch is off): `OFF` (an image fails, saying why; a PDF page
without a text layer is skipped and named in `Extracted.notes`), `PAGES_WITHOUT_TEXT` (the
default: images, and PDF pages without a text layer) or `ALWAYS` (also the pictures placed on
PDF pages that have a text layer: a scanned insert, a screenshot, a chart's words).

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

import itertools
import logging
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
from textkit.reasons import Value, Words, reason
from textkit.words import gettext_noop

if TYPE_CHECKING:
    from PIL.Image import Image

# The engine's detector works on the page scaled so its longer side is at most this (and cuts
# the lines it recognises from that scaled page): rendering or decoding larger costs memory and
# time for nothing.
MAX_SIDE = 2000


# What OCR reads (`OcrOptions.mode`; the values a knowledge base's `ocr_mode` stores).
OFF = "off"
PAGES_WITHOUT_TEXT = "pages_without_text"
ALWAYS = "always"
MODES = (OFF, PAGES_WITHOUT_TEXT, ALWAYS)


@dataclass(frozen=True)
class OcrOptions:
    """How OCR runs (the parse stage sets them from the knowledge base and Django's settings;
    these are the defaults).

    `mode`: OFF, PAGES_WITHOUT_TEXT or ALWAYS (above); `off_reason` is the sentence that says
    why when it is OFF ("OCR is off for this knowledge base"). `threads` counts onnxruntime's
    threads in one process; it holds from the engine's creation. `min_confidence` drops
    recognised lines the engine is less sure of (0-1)."""

    mode: str = PAGES_WITHOUT_TEXT
    off_reason: str = gettext_noop("OCR is off")
    threads: int = 1
    max_pages: int = 100
    max_seconds: float = 600.0
    max_pixels: int = 50_000_000
    min_confidence: float = 0.5

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown OCR mode {self.mode!r}")

    @property
    def on(self) -> bool:
        return self.mode != OFF


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


logger = logging.getLogger(__name__)

_ENGINE: Any = None
_ENGINE_LOCK = threading.Lock()
# The models inside the rapidocr wheel: named here, so the engine never looks for (and never
# downloads) any other.
_MODELS = {
    "Det": "PP-OCRv6_det_small.onnx",
    "Cls": "ch_ppocr_mobile_v2.0_cls_mobile.onnx",
    "Rec": "PP-OCRv6_rec_small.onnx",
}


def preload(threads: int) -> None:
    """Create the process's engine now (a worker child's start, where OCR is on), so the first
    page does not wait for it. Idempotent: a second call changes nothing."""
    with _ENGINE_LOCK:
        _engine(threads)


def _engine(threads: int) -> Any:
    """The process's engine, created on first use with its three models loaded (rapidocr would
    load each on its first call) and its direction classifier wrapped in `LineDirection`. Call
    with `_ENGINE_LOCK` held."""
    global _ENGINE
    if _ENGINE is None:
        import cv2
        import rapidocr
        from rapidocr import RapidOCR

        started = time.monotonic()
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
        engine: Any = RapidOCR(params=params)
        # rapidocr 3.10 (pinned) loads each model on its first use through these; loaded here,
        # the engine is whole once created. Its classifier is then asked about lines our way.
        engine._load_det_model()
        engine.text_cls = LineDirection(engine._load_cls_model())
        engine._load_rec_model()
        _ENGINE = engine
        logger.info("OCR engine loaded in %.1f s (%d threads)", time.monotonic() - started, threads)
    return _ENGINE


class LineDirection:
    """PP-OCR's direction classifier (0 or 180 degrees), asked about each line in pieces of the
    shape it was trained on, and about the page as a whole; in rapidocr's place for its
    classifier (same call, same output).

    The classifier reads a 48 x 192 picture, and rapidocr squeezes a whole line into it: a long
    line arrives squashed to a fraction of its width and is judged badly (upside-down lines
    were read as garbage, and upright ones turned over). Here each line is cut into pieces
    about four heights wide, each piece is judged, and the line's share of "180" is the mean of
    its pieces', weighted by their width. The page is upside down when most of its text, by
    width, is; a line is turned the other way from its page only when it is sure of it
    (`_SURE`) and long enough to tell (`_MIN_ASPECT` heights wide: page numbers, bullets and
    single characters look much the same either way up). `page_upside_down` says what the
    last call found (calls are serialised by `_ENGINE_LOCK`)."""

    _PIECE_ASPECT = 4.0  # the classifier's own input: 192 x 48
    _SURE = 0.98
    _MIN_ASPECT = 2.0

    def __init__(self, classifier: Any) -> None:
        self.classifier = classifier
        self.session = classifier.session  # onnxruntime's, for the thread check in the tests
        self.page_upside_down = False

    def __call__(self, img_list: Any) -> Any:
        import cv2
        from rapidocr.ch_ppocr_cls import TextClsOutput

        started = time.perf_counter()
        lines = [img_list] if not isinstance(img_list, list) else list(img_list)
        shares = self.upside_down_shares(lines)
        widths = [float(line.shape[1]) for line in lines]
        total = sum(widths)
        self.page_upside_down = bool(total) and (
            sum(share * width for share, width in zip(shares, widths, strict=True)) / total > 0.5
        )
        turned, results = [], []
        for line, share in zip(lines, shares, strict=True):
            flip = self.page_upside_down
            if line.shape[1] >= self._MIN_ASPECT * line.shape[0]:
                if share >= self._SURE:
                    flip = True
                elif share <= 1 - self._SURE:
                    flip = False
            turned.append(cv2.rotate(line, cv2.ROTATE_180) if flip else line)
            results.append(("180", share) if flip else ("0", 1 - share))
        return TextClsOutput(img_list=turned, cls_res=results, elapse=time.perf_counter() - started)

    def upside_down_shares(self, lines: list[Any]) -> list[float]:
        """Per line, the classifier's weight for "180", over its pieces."""
        pieces: list[Any] = []
        owners: list[tuple[int, int]] = []
        for index, line in enumerate(lines):
            height, width = line.shape[:2]
            count = max(1, round(width / (self._PIECE_ASPECT * max(1, height))))
            bounds = [round(width * k / count) for k in range(count + 1)]
            for left, right in itertools.pairwise(bounds):
                if right > left:
                    pieces.append(line[:, left:right])
                    owners.append((index, right - left))
        weights = [0.0] * len(lines)
        shares = [0.0] * len(lines)
        if pieces:
            judged = self.classifier(pieces).cls_res
            for (index, width), (label, score) in zip(owners, judged, strict=True):
                share = float(score) if label == "180" else 1 - float(score)
                shares[index] += share * width
                weights[index] += width
        return [s / w if w else 0.0 for s, w in zip(shares, weights, strict=True)]


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


IMAGE_TOO_LARGE = reason(
    "ocr.image_too_large",
    gettext_noop(
        "The image is %(width)s by %(height)s pixels; the limit for OCR is %(limit)s pixels."
    ),
)
# `off`: why OCR is off (`OcrOptions.off_reason`).
OCR_OFF = reason("ocr.off", gettext_noop("%(off)s."), words=("off",))
TOO_MANY_PAGES = reason(
    "ocr.too_many_pages",
    gettext_noop(
        "The document has %(pages)s pages that need OCR (pages without a text layer); the "
        "limit is %(limit)s pages per document."
    ),
)
TOO_MANY_PAGES_ALWAYS = reason(
    "ocr.too_many_pages_always",
    gettext_noop(
        "The document has %(pages)s pages that need OCR (pages without a text layer, and pages "
        "with pictures: OCR is set to always); the limit is %(limit)s pages per document."
    ),
)
TOO_SLOW = reason(
    "ocr.too_slow",
    gettext_noop(
        "OCR took longer than the limit of %(limit)s seconds per document; it had read "
        "%(read)s of %(pages)s pages. Upload the document in smaller parts, or with a text "
        "layer."
    ),
)


def check_pixels(
    width: int, height: int, *, too_large: Words = IMAGE_TOO_LARGE, **values: Value
) -> None:
    """Refuse a picture larger than OCR's pixel limit, with `too_large` (which says where it
    is, by `values`: a page's number)."""
    limit = current_options().max_pixels
    if width * height > limit:
        raise ParseError(too_large(width=width, height=height, limit=limit, **values))


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
        engine = _engine(options.threads)
        engine.text_cls.page_upside_down = False
        output = engine(pixels)
        upside_down = engine.text_cls.page_upside_down
    if output.boxes is None or output.txts is None or output.scores is None:
        return []
    boxes = output.boxes
    if upside_down:
        # Its lines were turned to be read; their places turn with the page, so the layout
        # reads it top to bottom as it was written.
        boxes = [[(image.width - x, image.height - y) for x, y in box] for box in boxes]
    found = list(zip(boxes, output.txts, output.scores, strict=True))
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
        if not self.options.on:  # the callers check first, and say what is left unread
            raise ParseError(OCR_OFF(off=self.options.off_reason))
        if pages > self.options.max_pages:
            too_many = TOO_MANY_PAGES_ALWAYS if self.options.mode == ALWAYS else TOO_MANY_PAGES
            raise ParseError(too_many(pages=pages, limit=self.options.max_pages))
        self.total = pages
        self.done = 0
        self.started = time.monotonic()

    def page(self, image: Image) -> list[Paragraph]:
        """The paragraphs of one page read whole."""
        self._next_page()
        return recognise(image)

    def pictures(self, images: list[Image]) -> list[list[Paragraph]]:
        """The paragraphs of each picture placed on one page (a page that has a text layer);
        the page counts once, and the time limit is checked before each picture."""
        self._next_page()
        found = []
        for image in images:
            self._check_time(read=self.done - 1)
            found.append(recognise(image))
        return found

    def _next_page(self) -> None:
        self._check_time(read=self.done)
        self.done += 1
        progress.report(f"OCR page {self.done}/{self.total}")

    def _check_time(self, *, read: int) -> None:
        if time.monotonic() - self.started > self.options.max_seconds:
            raise ParseError(
                TOO_SLOW(limit=round(self.options.max_seconds), read=read, pages=self.total)
            )
