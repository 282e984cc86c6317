"""A hit says where it stands in its file, for a citation a person can check: the pages of a
PDF, and the character range of the text its build extracted, in every search mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb import storage
from kb.models import Chunk, KnowledgeBase
from kb.services.documents import document_create
from retrieval.principals import api_key_create
from tests.retrieval.factories import api, build, publish, search
from tests.textkit.extract.pdf_fixtures import make_pdf
from textkit import extract as extractors

pytestmark = pytest.mark.django_db

FILLER = "Ordinary words about the office kitchen and its coffee machine rota."


def test_a_pdf_hit_names_its_page_and_its_range_of_the_extracted_text(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    pages = [
        [FILLER] * 6,
        [FILLER] * 6,
        ["Parking permits are renewed every January at the front desk."] + [FILLER] * 5,
    ]
    revision = document_create(
        kb=kb,
        key="facilities",
        title="Facilities",
        stored=storage.store_bytes(data := make_pdf(pages)),
        media_type=extractors.APPLICATION_PDF,
        original_name="facilities.pdf",
    )
    built = build(revision)
    _, key = api_key_create(tenant=kb.tenant, name="agent")
    (tmp_path / "facilities.pdf").write_bytes(data)
    extracted = extractors.extract(tmp_path / "facilities.pdf", extractors.APPLICATION_PDF).text()

    for mode in ("keyword", "vector", "hybrid"):
        body = {"kb": "handbook", "query": "parking permits renewed", "mode": mode}
        hit = search(api(key), body).json()["hits"][0]
        assert hit["document_key"] == "facilities", mode
        assert hit["location"]["unit"] == "page" and hit["location"]["last"] == 3, mode
        assert extracted[hit["char_start"] : hit["char_end"]] == hit["text"], mode

    chunks = Chunk.objects.filter(build=built).order_by("ordinal")
    assert all(chunk.location and chunk.location["unit"] == "page" for chunk in chunks)


def test_a_plain_text_hit_has_a_range_and_no_location(kb: KnowledgeBase) -> None:
    publish(kb, "kitchen", f"Intro line.\n\n{FILLER} The kettle is descaled on Fridays.")
    _, key = api_key_create(tenant=kb.tenant, name="agent")
    hit = search(api(key), {"kb": "handbook", "query": "kettle descaled", "mode": "keyword"})
    [first] = hit.json()["hits"][:1]
    assert first["location"] is None
    assert first["char_start"] is not None and first["char_end"] > first["char_start"]
