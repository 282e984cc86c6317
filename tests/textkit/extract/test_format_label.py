"""A file's kind by name, as the upload pages name the formats (`registry.format_label`): the
admin shows it where it showed the media type (issue 37, item 9)."""

from __future__ import annotations

import pytest

from textkit.extract import format_label
from textkit.extract.registry import FORMATS


@pytest.mark.parametrize(
    ("media_type", "label"),
    [
        ("application/pdf", "PDF"),
        ("application/vnd.openxmlformats-officedocument.wordprocessingml.document", "Word (.docx)"),
        ("text/plain", "plain text"),
        ("text/csv", "CSV (.csv)"),
        ("text/tab-separated-values", "CSV (.tsv)"),
        ("message/rfc822", "e-mail (.eml)"),
        ("image/png", "PNG image"),
        ("application/x-unknown", "application/x-unknown"),  # no format reads it: as it is
    ],
)
def test_a_media_type_is_named_as_its_format(media_type: str, label: str) -> None:
    assert format_label(media_type) == label


def test_every_media_type_canon_reads_has_a_name_of_its_own() -> None:
    for module in FORMATS:
        for media_type in module.MEDIA_TYPES:
            label = format_label(media_type)
            assert label and "/" not in label, (media_type, label)
