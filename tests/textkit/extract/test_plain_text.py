"""Plain text: encodings detected (UTF-8 with or without a BOM, UTF-16, GBK, cp1252), text
normalised, bad bytes never a crash, ten megabytes on one line quick; the title is a short first
line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.textkit.extract.files import parse_file, write
from textkit.chunker import chunk_text
from textkit.extract import TEXT_PLAIN, extract


class TestPlainText:
    def test_utf8_is_normalised(self, tmp_path: Path) -> None:
        path = write(tmp_path, "a.txt", "  Hello\r\nworld  \r\n\r\n\r\n\r\nCafe\u0301 知识库\x00\n")
        assert parse_file(path, TEXT_PLAIN) == "Hello\nworld\n\nCaf\u00e9 知识库"

    def test_utf8_bom_is_dropped(self, tmp_path: Path) -> None:
        path = write(tmp_path, "bom.txt", b"\xef\xbb\xbfHello BOM")
        assert parse_file(path, TEXT_PLAIN) == "Hello BOM"

    def test_utf16_with_bom(self, tmp_path: Path) -> None:
        path = write(tmp_path, "u16.txt", "Unicode 文本 text".encode("utf-16"))
        assert parse_file(path, TEXT_PLAIN) == "Unicode 文本 text"

    def test_gbk_is_detected(self, tmp_path: Path) -> None:
        chinese = "知识库管理系统支持上传文档，每次检索都只看到一个完整的、已发布的版本。"
        path = write(tmp_path, "gbk.txt", (chinese + "\n").encode("gbk") * 3)
        assert parse_file(path, TEXT_PLAIN) == "\n".join([chinese] * 3)

    def test_cp1252_is_detected(self, tmp_path: Path) -> None:
        french = "Le café est très bon, déjà vu. Naïve façade."
        path = write(tmp_path, "fr.txt", french.encode("cp1252"))
        assert parse_file(path, TEXT_PLAIN) == french

    def test_mostly_utf8_keeps_utf8_and_replaces_the_bad_byte(self, tmp_path: Path) -> None:
        body = "Hello 世界。" * 20
        path = write(tmp_path, "bad.txt", body.encode() + b"\xff tail")
        assert parse_file(path, TEXT_PLAIN) == body + "\ufffd tail"

    def test_undecodable_bytes_never_crash(self, tmp_path: Path) -> None:
        path = write(tmp_path, "junk.txt", b"ok " + bytes(range(0x80, 0x100)) * 3 + b" end")
        text = parse_file(path, TEXT_PLAIN)
        assert text.startswith("ok ")
        assert text.endswith(" end")

    def test_ten_megabyte_single_line_parses_and_chunks_quickly(self, tmp_path: Path) -> None:
        line = ("Canon keeps every published version complete. 知识库。 " * 200_000)[:10_000_000]
        path = write(tmp_path, "big.txt", line)
        started = time.perf_counter()
        text = parse_file(path, TEXT_PLAIN)
        parsed = time.perf_counter() - started
        pieces = chunk_text(text, size=800, overlap=100)
        chunked = time.perf_counter() - started - parsed
        assert text == line.strip()
        assert parsed < 3, f"parsing took {parsed:.1f}s"
        assert chunked < 8, f"chunking took {chunked:.1f}s"
        assert all(len(piece.text) <= 800 for piece in pieces)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Release notes\n\nVersion 2 is out.", "Release notes"),
        ("A single line only", ""),
        ("x" * 200 + "\nmore", ""),
    ],
)
def test_plain_text_title_is_a_short_first_line(tmp_path: Path, text: str, expected: str) -> None:
    assert extract(write(tmp_path, "n.txt", text), TEXT_PLAIN).title == expected
