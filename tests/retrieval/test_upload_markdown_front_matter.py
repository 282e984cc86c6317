"""Markdown front matter through the upload API into a published build: the fields are metadata,
never the text of a chunk nor found by search, and only a `title` field is the title."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from kb.models import Build, Chunk, Document, KnowledgeBase, Revision
from tests.retrieval.factories import api, build, search

pytestmark = pytest.mark.django_db

TITLED = (
    "---\ntitle: Herons of the marsh\nauthor: Ann Example\nyear: soon\n---\n\n"
    "Herons stand still in shallow water.\n\n## Feeding\n\nThey strike fast at fish.\n"
)
UNTITLED = '+++\nyear = "soon"\nreviewer = "Quillfeather"\n+++\n\nEgrets nest in colonies.\n'


def _upload_and_build(api_key: str, name: str, text: str) -> Document:
    client = api(api_key)
    response = client.post(
        "/api/v1/kbs/handbook/documents/",
        {"key": name, "file": SimpleUploadedFile(name, text.encode())},
        headers={"Idempotency-Key": f"upload-{name}"},
    )
    assert response.status_code == 201, response.content
    revision = Revision.objects.get(document_id=response.json()["document_id"])
    assert build(revision).state == Build.State.LIVE
    return Document.objects.get(pk=revision.document_id)


def test_front_matter_is_metadata_not_text_and_its_title_is_the_title(
    api_key: str, kb: KnowledgeBase
) -> None:
    # Given two notes uploaded with no title: YAML front matter with a title, TOML without
    titled = _upload_and_build(api_key, "herons.md", TITLED)
    untitled = _upload_and_build(api_key, "egrets.md", UNTITLED)

    # Then the front matter's title is the title, and a field that is not `title` never is
    assert titled.title == "Herons of the marsh"
    assert untitled.title == "egrets.md"  # no title anywhere: the key, not "year: soon"
    # and no chunk holds a field of the front matter or its delimiters
    chunks = list(Chunk.objects.filter(document__in=[titled, untitled]).order_by("ordinal"))
    texts = "\n".join(chunk.text for chunk in chunks)
    assert "Herons stand still in shallow water." in texts and "Egrets nest" in texts
    for field in ("year", "soon", "Ann Example", "Quillfeather", "---", "+++"):
        assert field not in texts, field
    # nor does search find one
    client = api(api_key)
    for word in ("soon", "Quillfeather"):
        body = {"kb": "handbook", "query": word, "mode": "keyword"}
        assert search(client, body).json()["hits"] == [], word
