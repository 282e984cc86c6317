"""Pictures of pages with known text, for the OCR tests: drawn with Pillow in Noto Sans CJK,
which covers Chinese and Latin and ships in a pip package of the dev extra
(cvttf-NotoSansCJK-Regular), so the tests need no system font."""

from __future__ import annotations

import io
from functools import cache

import cvttf_NotoSansCJK_Regular
from PIL import Image, ImageDraw, ImageFont

# An A4 page at 150 dpi.
PAGE_SIZE = (1240, 1754)


@cache
def font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(cvttf_NotoSansCJK_Regular.get_TTF_path(), size)


def page(
    paragraphs: list[list[str]],
    *,
    size: int = 30,
    title: str = "",
    title_size: int = 48,
    page_size: tuple[int, int] | None = None,
    mode: str = "RGB",
) -> Image.Image:
    """A white page: an optional title, then paragraphs of lines (a blank line between); as
    tall as its text needs unless `page_size` is given (small pages keep the tests fast)."""
    if page_size is None:
        count = sum(len(p) + 1 for p in paragraphs)
        height = 200 + (title_size * 2 if title else 0) + int(size * 1.5) * count
        page_size = (PAGE_SIZE[0], height)
    background: tuple[int, ...] | int = (255, 255, 255) if mode == "RGB" else 255
    if mode == "RGBA":
        background = (0, 0, 0, 0)
    image = Image.new(mode, page_size, background)
    draw = ImageDraw.Draw(image)
    ink: tuple[int, ...] | int = (0, 0, 0, 255)
    if mode in ("L", "RGB"):
        ink = 0 if mode == "L" else (0, 0, 0)
    y = 100
    if title:
        draw.text((100, y), title, font=font(title_size), fill=ink)
        y += int(title_size * 2)
    for lines in paragraphs:
        for line in lines:
            draw.text((100, y), line, font=font(size), fill=ink)
            y += int(size * 1.5)
        y += int(size * 1.5)
    return image


def two_columns(left: list[str], right: list[str], *, size: int = 28) -> Image.Image:
    image = Image.new("RGB", PAGE_SIZE, (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for x, lines in ((80, left), (660, right)):
        y = 120
        for line in lines:
            draw.text((x, y), line, font=font(size), fill=(0, 0, 0))
            y += int(size * 1.5)
    return image


def with_upside_down_lines(
    upright: list[str], upside_down: list[str], *, size: int = 40
) -> Image.Image:
    """A page of `upright` lines, then `upside_down` lines each turned by 180 degrees where it
    stands (a label pasted the wrong way up, a form's counterfoil)."""
    image = Image.new(
        "RGB",
        (PAGE_SIZE[0], 160 + int(size * 2.5) * (len(upright) + len(upside_down))),
        (255, 255, 255),
    )
    draw = ImageDraw.Draw(image)
    y = 80
    for line in upright:
        draw.text((100, y), line, font=font(size), fill=(0, 0, 0))
        y += int(size * 2.5)
    for line in upside_down:
        strip = Image.new("RGB", (PAGE_SIZE[0] - 140, size * 2), (255, 255, 255))
        ImageDraw.Draw(strip).text((10, size // 3), line, font=font(size), fill=(0, 0, 0))
        image.paste(strip.rotate(180), (100, y))
        y += int(size * 2.5)
    return image


def encoded(image: Image.Image, format: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format=format, **options)
    return out.getvalue()


def scanned_pdf(pages: list[Image.Image]) -> bytes:
    """A PDF whose pages are only pictures (no text layer), as a scanner writes it."""
    out = io.BytesIO()
    first, *rest = [p.convert("RGB") for p in pages]
    first.save(out, format="PDF", save_all=True, append_images=rest, resolution=150)
    return out.getvalue()


def char_accuracy(expected: str, found: str) -> float:
    """1 - character error rate (Levenshtein distance over the expected length), spaces
    ignored: OCR of CJK puts none and of Latin may differ in them."""
    a = "".join(expected.split())
    b = "".join(found.split())
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return max(0.0, 1 - previous[-1] / max(1, len(a)))
