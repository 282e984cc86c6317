"""Slides, spreadsheets and OpenDocument files through the upload API into a published build:
each goes live, is found by a word in its text, and its parsed form knows where every block
stands (slide, or sheet and rows); a deck without text fails its build with the reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pptx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from ingestion.models import StageResult
from ingestion.pipeline.run import task_execute
from kb import storage
from kb.models import Build, KnowledgeBase, Revision
from tests.retrieval.factories import api, build, search
from tests.textkit.extract.test_odf import make_odp, make_ods, make_odt
from tests.textkit.extract.test_pptx import make_pptx
from tests.textkit.extract.test_xlsx import make_xlsx
from textkit.extract import Extracted
from work.models import IngestionTask

pytestmark = pytest.mark.django_db


def _csv(path: Path) -> Path:
    path.write_text("City,Population\nShanghai,24870000\nBeijing,21890000\n", encoding="utf-8")
    return path


FORMATS: list[tuple[str, Callable[[Path], Path], str, str | None]] = [
    # (file name, fixture maker, a word in it, the unit of its blocks' locations)
    ("review.pptx", make_pptx, "regional", "slide"),
    ("sales.xlsx", make_xlsx, "region", "row"),
    ("cities.csv", _csv, "shanghai", "row"),
    ("handbook.odt", make_odt, "monthly", None),
    ("sales.ods", make_ods, "region", "row"),
    ("roadmap.odp", make_odp, "budget", "slide"),
]


@pytest.mark.parametrize(("name", "make", "word", "unit"), FORMATS)
def test_an_uploaded_file_goes_live_and_is_found(
    api_key: str,
    kb: KnowledgeBase,
    tmp_path: Path,
    name: str,
    make: Callable[[Path], Path],
    word: str,
    unit: str | None,
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
    hits = search(client, {"kb": "handbook", "query": word, "mode": "keyword"}).json()["hits"]
    assert [hit["document_key"] for hit in hits] == [name]
    parsed = StageResult.objects.get(task__build=built, stage=StageResult.Stage.PARSE).output
    blocks = Extracted.from_json(storage.read_text(parsed["text_path"])).blocks
    units = {b.location.unit for b in blocks if b.location is not None}
    assert units == ({unit} if unit else set())


def test_a_deck_without_text_fails_its_build_with_the_reason(
    api_key: str, kb: KnowledgeBase, tmp_path: Path
) -> None:
    """Issue 37: a deck of empty slides went live reading "Slide 1"."""
    deck = pptx.Presentation()
    for _ in range(2):
        deck.slides.add_slide(deck.slide_layouts[6])  # blank: a picture would be all it holds
    path = tmp_path / "pictures.pptx"
    deck.save(str(path))
    client: Client = api(api_key)

    response = client.post(
        "/api/v1/kbs/handbook/documents/",
        {"key": "pictures", "file": SimpleUploadedFile("pictures.pptx", path.read_bytes())},
        headers={"Idempotency-Key": "upload-pictures"},
    )

    assert response.status_code == 201, response.content
    revision = Revision.objects.get(document_id=response.json()["document_id"])
    task = IngestionTask.objects.get(build__revision=revision)
    IngestionTask.objects.filter(pk=task.pk).update(available_at=None)
    assert task_execute(task_id=task.pk, worker_id="test") == "failed"
    failed = Build.objects.get(revision=revision)
    assert failed.state == Build.State.FAILED
    assert failed.error.startswith("The presentation has no text")
    hits = search(client, {"kb": "handbook", "query": "slide", "mode": "keyword"}).json()["hits"]
    assert hits == []
