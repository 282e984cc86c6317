"""Rules every format shares: an empty, wordless or too long file is refused, as is a media type
with no extractor (and every supported one has one); a title is one line of at most 500
characters."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.textkit.extract.files import parse_file, write
from textkit import extract as extractors
from textkit.extract import (
    SUPPORTED_MEDIA_TYPES,
    TEXT_HTML,
    TEXT_PLAIN,
    ParseError,
    UnsupportedMediaType,
    extract,
)


@pytest.mark.parametrize("media_type", sorted(SUPPORTED_MEDIA_TYPES))
def test_empty_file_is_refused(tmp_path: Path, media_type: str) -> None:
    with pytest.raises(ParseError, match="The file is empty"):
        parse_file(write(tmp_path, "empty", b""), media_type)


def test_unsupported_media_type_is_refused(tmp_path: Path) -> None:
    # (image/png, the example here before, is read by OCR now: test_image.py)
    with pytest.raises(UnsupportedMediaType, match="image/gif"):
        parse_file(write(tmp_path, "x.gif", b"GIF89a"), "image/gif")


def test_text_without_words_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="contains no text"):
        parse_file(write(tmp_path, "blank.txt", b" \n\t\r\n \x00 "), TEXT_PLAIN)


def test_text_longer_than_the_limit_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "long.txt", "x" * 1001)
    with pytest.raises(ParseError, match="longer than the limit of 1,000 characters"):
        parse_file(path, TEXT_PLAIN, max_chars=1000)
    assert parse_file(path, TEXT_PLAIN, max_chars=1001) == "x" * 1001


def test_titles_are_one_line_of_at_most_500_characters(tmp_path: Path) -> None:
    html = f"<title>{'Long   title ' * 100}</title><p>Body.</p>"
    title = extract(write(tmp_path, "t.html", html), TEXT_HTML).title
    assert len(title) == 500 and "  " not in title


def test_every_supported_media_type_has_an_extractor() -> None:
    assert set(extractors.EXTRACTORS) == extractors.SUPPORTED_MEDIA_TYPES
