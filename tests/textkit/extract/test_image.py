"""Images (PNG, JPEG, TIFF, WebP) read by OCR: text and page locations, multi-page TIFF, a title
only when the first line looks like one, transparency, and bad files refused readably (a
decompression bomb before it is decoded, content that is not an image, a picture without
text)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from tests.textkit.extract.files import write
from tests.textkit.extract.ocr_fixtures import char_accuracy, encoded, page
from textkit.extract import (
    PAGE,
    Location,
    ParseError,
    UnsupportedMediaType,
    accepted_extensions,
    accepted_kinds,
    detect_media_type,
    extract,
    ocr,
    progress,
)

NOTICE = [["Turbine hall closed for inspection", "until the bearings are replaced."]]


def test_a_png_is_read_with_its_page_and_title(tmp_path: Path) -> None:
    image = page([*NOTICE, ["Use the east entrance."]], title="Site notice", title_size=56)
    path = write(tmp_path, "notice.png", encoded(image, "PNG"))
    extracted = extract(path, "image/png")
    assert extracted.title == "Site notice"
    texts = [block.text for block in extracted.blocks]
    assert texts[0] == "Site notice"
    assert "Turbine hall closed for inspection until the bearings" in texts[1]
    assert {block.location for block in extracted.blocks} == {Location(PAGE, 1, 1)}


def test_no_title_when_the_first_line_is_not_set_apart(tmp_path: Path) -> None:
    path = write(tmp_path, "notice.png", encoded(page([*NOTICE, ["Use the east door."]]), "PNG"))
    assert extract(path, "image/png").title == ""


def test_a_jpeg_of_chinese_text(tmp_path: Path) -> None:
    lines = ["设备检修期间请走东门。", "检修完成后恢复正常通行。"]
    image = page([lines], size=36, mode="L")
    path = write(tmp_path, "notice.jpg", encoded(image, "JPEG", quality=85))
    found = extract(path, "image/jpeg").text()
    assert char_accuracy("".join(lines), found) >= 0.9
    assert "东门" in found


def test_each_page_of_a_tiff_is_a_page(tmp_path: Path) -> None:
    first, second = page([["First page about boilers."]]), page([["Second page about valves."]])
    data = encoded(first, "TIFF", save_all=True, append_images=[second], compression="tiff_lzw")
    labels: list[str] = []
    with progress.reporting(labels.append):
        blocks = extract(write(tmp_path, "scan.tiff", data), "image/tiff").blocks
    assert [(b.location, "boilers" in b.text, "valves" in b.text) for b in blocks] == [
        (Location(PAGE, 1, 1), True, False),
        (Location(PAGE, 2, 2), False, True),
    ]
    assert labels == ["OCR page 1/2", "OCR page 2/2"]


def test_a_webp_with_a_transparent_background(tmp_path: Path) -> None:
    image = page([["Black letters on nothing at all."]], mode="RGBA")
    path = write(tmp_path, "clear.webp", encoded(image, "WEBP", lossless=True))
    assert "letters on nothing" in extract(path, "image/webp").text()


def test_image_kinds_are_accepted_by_name_and_first_bytes() -> None:
    jpeg = encoded(page([]), "JPEG")
    assert detect_media_type("scan.JPG", jpeg[:4096]) == "image/jpeg"
    # A JPEG saved under a .png name is still an image: read as what it is.
    assert detect_media_type("screenshot.png", jpeg[:4096]) == "image/png"
    with pytest.raises(UnsupportedMediaType, match="not a PNG, JPEG, TIFF or WebP"):
        detect_media_type("notes.png", b"just some text")
    assert {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp"} <= set(accepted_extensions())
    assert "images (PNG, JPEG, TIFF, WebP" in accepted_kinds()


def png_header_only(width: int, height: int) -> bytes:
    """A tiny PNG file whose header claims `width` x `height` pixels (a decompression bomb's
    shape: the pixels would only exist once decoded)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    ("width", "height", "message"),
    [
        # past Canon's limit (50 million), below Pillow's own warning
        (10_000, 6_000, "10,000 by 6,000 pixels; the limit for OCR is 50,000,000 pixels"),
        # a hundred thousand squared: Pillow's own bomb check refuses it on opening
        (100_000, 100_000, "too large to read"),
    ],
)
def test_a_decompression_bomb_is_refused_before_decoding(
    tmp_path: Path, width: int, height: int, message: str
) -> None:
    path = write(tmp_path, "bomb.png", png_header_only(width, height))
    assert path.stat().st_size < 200
    with pytest.raises(ParseError, match=message):
        extract(path, "image/png")


def test_the_pixel_limit_comes_from_the_options(tmp_path: Path) -> None:
    path = write(tmp_path, "small.png", encoded(page([], page_size=(400, 300)), "PNG"))
    limited = ocr.configured(ocr.OcrOptions(max_pixels=100_000))
    with limited, pytest.raises(ParseError, match="400 by 300 pixels"):
        extract(path, "image/png")


def test_too_many_tiff_pages_are_refused(tmp_path: Path) -> None:
    blank = page([], page_size=(200, 200))
    data = encoded(blank, "TIFF", save_all=True, append_images=[blank, blank])
    limited = ocr.configured(ocr.OcrOptions(max_pages=2))
    with limited, pytest.raises(ParseError, match=r"3 pages that need OCR .* limit is 2 pages"):
        extract(write(tmp_path, "long.tif", data), "image/tiff")


def test_a_damaged_image_is_refused_readably(tmp_path: Path) -> None:
    data = encoded(page([["Cut short."]]), "PNG")
    path = write(tmp_path, "cut.png", data[: len(data) // 2])
    with pytest.raises(ParseError, match="damaged or truncated"):
        extract(path, "image/png")
    path = write(tmp_path, "junk.png", b"\x89PNG\r\n\x1a\n" + b"junk" * 100)
    with pytest.raises(ParseError, match="damaged or not a PNG, JPEG, TIFF or WebP"):
        extract(path, "image/png")


def test_a_picture_without_text_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "white.png", encoded(page([], page_size=(600, 400)), "PNG"))
    with pytest.raises(ParseError, match="OCR found no text in the image"):
        extract(path, "image/png")
