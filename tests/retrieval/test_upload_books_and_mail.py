"""E-books, Rich Text and e-mail through the upload API into a published build: each goes live
and is found by a word in its text, an e-mail also by a word of its inlined attachment."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from kb.models import Build, KnowledgeBase, Revision
from tests.retrieval.factories import api, build, search
from tests.textkit.extract.test_epub import book_parts, write_epub
from tests.textkit.extract.test_mail import make_eml, make_msg
from tests.textkit.extract.test_rtf import WORDPAD_CHINESE

pytestmark = pytest.mark.django_db


def _epub(path: Path) -> Path:
    return write_epub(path, book_parts())


def _rtf(path: Path) -> Path:
    path.write_text(WORDPAD_CHINESE, encoding="ascii")
    return path


FORMATS: list[tuple[str, Callable[[Path], Path], list[str], str]] = [
    # (file name, fixture maker, words in it, its title)
    ("book.epub", _epub, ["indexes", "meaning"], "The Knowledge Book"),
    ("report.rtf", _rtf, ["café"], "季度报告"),
    ("reply.eml", make_eml, ["figures", "marketing"], "Quarterly figures 季度报告"),
    ("reply.msg", make_msg, ["figures", "marketing"], "Quarterly figures 季度报告"),
]


@pytest.mark.parametrize(("name", "make", "words", "title"), FORMATS)
def test_an_uploaded_file_goes_live_and_is_found(
    api_key: str,
    kb: KnowledgeBase,
    tmp_path: Path,
    name: str,
    make: Callable[[Path], Path],
    words: list[str],
    title: str,
) -> None:
    client: Client = api(api_key)
    content = make(tmp_path / name).read_bytes()

    response = client.post(
        "/api/v1/kbs/handbook/documents/",
        {"key": name, "file": SimpleUploadedFile(name, content)},
        headers={"Idempotency-Key": f"upload-{name}"},
    )

    assert response.status_code == 201, response.content
    revision = Revision.objects.get(document_id=response.json()["document_id"])
    built = build(revision)
    assert built.state == Build.State.LIVE
    revision.refresh_from_db()
    assert revision.extracted_title == title
    for word in words:
        body = {"kb": "handbook", "query": word, "mode": "keyword"}
        hits = search(client, body).json()["hits"]
        assert [hit["document_key"] for hit in hits] == [name], word
