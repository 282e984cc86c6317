"""Every place that tells people which files Canon reads says what the registry reads (issue 37:
the upload API's help listed 5 formats of 15)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from textkit.extract import accepted_extensions, accepted_kinds
from textkit.extract.registry import FORMATS

ROOT = Path(__file__).resolve().parents[2]

# How README's first paragraph names each format module; a new format fails this test until
# it is named there (and here).
README_NAMES = {
    "pdf": "PDF",
    "docx": "Word",
    "html": "HTML",
    "markdown": "Markdown",
    "plain": "text",
    "image": "OCR",
    "epub": "EPUB",
    "rtf": "RTF",
    "mail": "e-mail",
    "pptx": "PowerPoint",
    "xlsx": "Excel",
    "csv": "CSV",
    "odt": "OpenDocument",
    "ods": "OpenDocument",
    "odp": "OpenDocument",
}


@pytest.mark.django_db
def test_the_upload_schema_lists_every_accepted_kind() -> None:
    schema = Client().get("/api/schema/?format=json").json()
    upload = schema["paths"]["/api/v1/kbs/{kb}/documents/"]["post"]
    reference = upload["requestBody"]["content"]["multipart/form-data"]["schema"]["$ref"]
    form = schema["components"]["schemas"][reference.rsplit("/", 1)[1]]

    help_text = form["properties"]["file"]["description"]

    assert accepted_kinds() in help_text
    assert all(module.LABEL in help_text for module in FORMATS)
    assert all(ending in help_text for ending in accepted_extensions())


def test_the_readme_names_every_format() -> None:
    assert set(README_NAMES) == {module.__name__.rsplit(".", 1)[1] for module in FORMATS}
    introduction = (ROOT / "README.md").read_text().split("\n\n")[1]
    assert all(name in introduction for name in README_NAMES.values())


def test_the_admin_guide_does_not_list_fewer_formats() -> None:
    guide = (ROOT / "docs" / "ADMIN_GUIDE.md").read_text()
    assert "PDF, DOCX, HTML" not in guide
