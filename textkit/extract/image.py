"""Images (PNG, JPEG, TIFF, WebP): their text through OCR (`ocr`), one page per image, or per
frame of a multi-page TIFF; every block knows its page.

Pillow opens only these four formats (never, say, EPS, which would run Ghostscript), and the
pixel limit is checked from each frame's header before it is decoded (a decompression bomb is
refused unread). A photo's EXIF orientation is applied; a large JPEG is decoded at a reduced
scale close to what the OCR engine reads.

With OCR off (the knowledge base's setting, or the server's) an image fails its build, saying
so: it has no text but what OCR reads.

The title is the first line when it looks like one: a single line standing alone, set larger
than the text under it. Otherwise "" and the upload keeps the file's name: a misread line is a
worse title than the name someone gave the file.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from PIL import Image, ImageOps, UnidentifiedImageError

from textkit.extract import ocr
from textkit.extract.base import (
    PAGE,
    PARAGRAPH,
    Block,
    Extracted,
    Location,
    ParseError,
    UnsupportedMediaType,
)
from textkit.extract.plain import MAX_TITLE_LINE
from textkit.reasons import reason
from textkit.words import gettext_noop

MEDIA_TYPES = ("image/png", "image/jpeg", "image/tiff", "image/webp")
EXTENSIONS = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".tif": "image/tiff",
    ".tiff": "image/tiff",
    ".webp": "image/webp",
}
LABEL = gettext_noop("images (PNG, JPEG, TIFF, WebP; read by OCR)")
LABELS = {
    "image/png": gettext_noop("PNG image"),
    "image/jpeg": gettext_noop("JPEG image"),
    "image/tiff": gettext_noop("TIFF image"),
    "image/webp": gettext_noop("WebP image"),
}

# Pillow's names of the formats read, by media type.
_PILLOW_FORMATS = {
    "image/png": "PNG",
    "image/jpeg": "JPEG",
    "image/tiff": "TIFF",
    "image/webp": "WEBP",
}
_MAGIC = (
    b"\x89PNG\r\n\x1a\n",
    b"\xff\xd8\xff",
    b"II*\x00",
    b"MM\x00*",
    b"II+\x00",  # BigTIFF
    b"MM\x00+",
)
NOT_AN_IMAGE = reason(
    "image.not_image",
    gettext_noop(
        "The file is named like an image, but its content is not a PNG, JPEG, TIFF or WebP image."
    ),
)
# `off`: why OCR is off (`ocr.OcrOptions.off_reason`).
OCR_OFF = reason(
    "image.ocr_off",
    gettext_noop(
        "%(off)s, and an image's text can only be read by OCR. Turn OCR on, or upload the "
        "document with a text layer (a PDF or a word-processing file)."
    ),
    words=("off",),
)
NO_TEXT_FOUND = reason("image.no_text_found", gettext_noop("OCR found no text in the image."))
# `detail`: Pillow's own words (English, as the logs have them).
TOO_LARGE = reason("image.too_large", gettext_noop("The image is too large to read: %(detail)s"))
DAMAGED_OR_UNKNOWN = reason(
    "image.damaged_or_unknown",
    gettext_noop("The image is damaged or not a PNG, JPEG, TIFF or WebP file."),
)
TIFF_PAGE_DAMAGED = reason(
    "image.tiff_page_damaged", gettext_noop("The TIFF image is damaged: a page cannot be read.")
)
DAMAGED = reason(
    "image.damaged", gettext_noop("The image is damaged or truncated and cannot be read.")
)
PAGE_TOO_LARGE = reason(
    "image.page_too_large",
    gettext_noop(
        "Page %(page)s of the image is %(width)s by %(height)s pixels; the limit for OCR is "
        "%(limit)s pixels."
    ),
)
# A title is set at least this much larger than the text under it (in box heights, which count
# ascenders and descenders: 56 and 30 pixel type measure about 50 and 36).
_TITLE_SIZE = 1.15


def _is_image_head(head: bytes) -> bool:
    return head.startswith(_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def check_head(head: bytes, media_type: str) -> None:
    # Any of the four image kinds passes for any image name (a screenshot saved as .png that is
    # a JPEG is read as what it is); anything else is refused.
    if not _is_image_head(head):
        raise UnsupportedMediaType(NOT_AN_IMAGE())


def extract(path: Path, *, max_chars: int) -> Extracted:
    options = ocr.current_options()
    if not options.on:
        raise ParseError(OCR_OFF(off=options.off_reason))
    pages = _frames(path)
    session = ocr.DocumentOcr(len(pages))
    blocks: list[Block] = []
    paragraphs_of_first: list[ocr.Paragraph] = []
    for number, frame in enumerate(pages, start=1):
        image = _decode(path, frame)
        paragraphs = session.page(image)
        del image
        if number == 1:
            paragraphs_of_first = paragraphs
        location = Location(PAGE, number, number)
        blocks.extend(Block(PARAGRAPH, p.text, location=location) for p in paragraphs)
    if not blocks:
        raise ParseError(NO_TEXT_FOUND())
    return Extracted(title=_title(paragraphs_of_first), blocks=blocks)


def _open(path: Path) -> Image.Image:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            return Image.open(path, formats=list(_PILLOW_FORMATS.values()))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ParseError(TOO_LARGE(detail=str(exc))) from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ParseError(DAMAGED_OR_UNKNOWN()) from exc


def _frames(path: Path) -> list[int]:
    """The frames that are pages (all of a TIFF's; the first of anything else), each checked
    against the pixel limit from its header."""
    with _open(path) as image:
        count = getattr(image, "n_frames", 1) if image.format == "TIFF" else 1
        frames = []
        for frame in range(count):
            try:
                image.seek(frame)
            except (EOFError, OSError, ValueError) as exc:
                raise ParseError(TIFF_PAGE_DAMAGED()) from exc
            if count == 1:
                ocr.check_pixels(image.width, image.height)
            else:
                ocr.check_pixels(
                    image.width, image.height, too_large=PAGE_TOO_LARGE, page=frame + 1
                )
            frames.append(frame)
    return frames


def _decode(path: Path, frame: int) -> Image.Image:
    with _open(path) as image:
        try:
            image.seek(frame)
            if image.format == "JPEG":
                image.draft("RGB", (ocr.MAX_SIDE, ocr.MAX_SIDE))
            image.load()
            decoded = _flatten(ImageOps.exif_transpose(image) or image)
            # Closing the file below would free the pixels of the image it opened.
            return decoded.copy() if decoded is image else decoded
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise ParseError(DAMAGED()) from exc


def _flatten(image: Image.Image) -> Image.Image:
    """RGB or grey, transparency on white (text drawn on a transparent background is readable
    only on white), at most MAX_SIDE pixels on its longer side."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        image = image.point(lambda value: value * (1 / 256)).convert("L")
    elif image.mode == "F":
        image = image.convert("L")
    if image.mode in ("RGBA", "LA", "PA", "P") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, rgba).convert("RGB")
    elif image.mode not in ("L", "RGB"):
        image = image.convert("RGB")
    if max(image.size) > ocr.MAX_SIDE:
        image = image.copy()
        image.thumbnail((ocr.MAX_SIDE, ocr.MAX_SIDE), Image.Resampling.LANCZOS)
    return image


def _title(paragraphs: list[ocr.Paragraph]) -> str:
    if len(paragraphs) < 2:
        return ""
    first, rest = paragraphs[0], paragraphs[1:]
    body = sorted(p.height for p in rest)[len(rest) // 2]
    if (
        first.lines == 1
        and len(first.text) <= MAX_TITLE_LINE
        and first.height >= _TITLE_SIZE * body
    ):
        return first.text
    return ""
