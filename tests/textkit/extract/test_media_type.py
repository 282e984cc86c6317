"""What a file is, from its name and its first bytes (`detect_media_type`): the extension must
match the content, and a refusal says why."""

from __future__ import annotations

import os

import pytest

from textkit.extract import (
    APPLICATION_DOCX,
    APPLICATION_PDF,
    SUPPORTED_MEDIA_TYPES,
    TEXT_HTML,
    TEXT_MARKDOWN,
    TEXT_PLAIN,
    ParseError,
    UnsupportedMediaType,
    detect_media_type,
)


class TestDetectMediaType:
    @pytest.mark.parametrize(
        ("filename", "head", "expected"),
        [
            ("notes.txt", b"hello", TEXT_PLAIN),
            ("NOTES.TEXT", b"hello", TEXT_PLAIN),
            ("readme.md", b"# Title", TEXT_MARKDOWN),
            ("guide.Markdown", b"# Title", TEXT_MARKDOWN),
            ("page.htm", b"<html>", TEXT_HTML),
            ("page.HTML", b"<!doctype html>", TEXT_HTML),
            ("paper.pdf", b"%PDF-1.7\n", APPLICATION_PDF),
            ("C:\\Users\\me\\Report.DOCX", b"PK\x03\x04rest", APPLICATION_DOCX),
            ("utf16.txt", "hi".encode("utf-16"), TEXT_PLAIN),
        ],
    )
    def test_accepts_matching_content(self, filename: str, head: bytes, expected: str) -> None:
        assert detect_media_type(filename, head) == expected
        assert expected in SUPPORTED_MEDIA_TYPES

    def test_rejects_unknown_extension(self) -> None:
        with pytest.raises(UnsupportedMediaType, match=r'"\.exe" are not supported'):
            detect_media_type("setup.exe", b"MZ")

    def test_rejects_missing_extension(self) -> None:
        with pytest.raises(UnsupportedMediaType, match="no extension"):
            detect_media_type("README", b"hello")

    def test_rejects_garbage_named_pdf(self) -> None:
        with pytest.raises(UnsupportedMediaType, match="not a PDF"):
            detect_media_type("paper.pdf", os.urandom(512))

    def test_rejects_non_zip_named_docx(self) -> None:
        with pytest.raises(UnsupportedMediaType, match=r"not one"):
            detect_media_type("report.docx", b"%PDF-1.4 not a zip")

    def test_explains_old_word_files(self) -> None:
        head = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(100)
        with pytest.raises(UnsupportedMediaType, match=r"\.doc"):
            detect_media_type("report.docx", head)

    @pytest.mark.parametrize("filename", ["notes.txt", "readme.md", "page.html"])
    def test_rejects_binary_named_as_text(self, filename: str) -> None:
        with pytest.raises(UnsupportedMediaType, match="binary data"):
            detect_media_type(filename, b"\x7fELF\x02\x01\x01\x00\x00\x00")

    def test_rejects_pdf_named_as_text(self) -> None:
        with pytest.raises(UnsupportedMediaType, match="binary data"):
            detect_media_type("notes.txt", b"%PDF-1.4\n")

    def test_rejects_empty_file(self) -> None:
        with pytest.raises(ParseError, match="empty"):
            detect_media_type("notes.txt", b"")
