"""Markdown front matter through a folder source's sync into published builds: its fields reach
the document's metadata through the metadata map, never the text of a chunk, and only a `title`
field is the title (the Markdown extractor and the source read the block with one reader)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ingestion.pipeline.run import task_execute
from kb.models import Build, Chunk, Document, KnowledgeBase
from kb.services.metadata import metadata_field_save
from sources.models import Source, SyncRun
from sources.services.runs import sync_request
from tests.helpers import run_pending

pytestmark = pytest.mark.django_db(transaction=True)  # the run claims its task by the clock


def test_front_matter_is_metadata_and_title_never_text(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    # Given a folder of notes: YAML front matter with a title, YAML without one (its last
    # field once became the title), TOML with one, and a source mapping two of their fields
    metadata_field_save(kb=kb, name="author", type="string")
    metadata_field_save(kb=kb, name="year", type="string")
    source = folder_source(metadata_map={"author": "author", "year": "year"})
    root = Path(source.config["path"])
    (root / "birds").mkdir()
    (root / "birds/herons.md").write_text(
        "---\ntitle: Herons of the marsh\nauthor: Ann Example\nyear: soon\n---\n\n"
        "Herons stand still in shallow water.\n"
    )
    (root / "birds/egrets.md").write_text(
        "---\nauthor: Ann Example\nyear: soon\n---\nEgrets nest in colonies.\n\n"
        "## Nesting\n\nTheir nests are platforms of sticks.\n"
    )
    (root / "birds/ibis.md").write_text(
        '+++\ntitle = "The sacred ibis"\nyear = "1850"\n+++\n\nIbises probe the mud.\n'
    )

    # When the source syncs and the builds run
    run, _ = sync_request(source=source)
    assert run.task_id is not None
    task_execute(task_id=run.task_id, worker_id="test")
    run.refresh_from_db()
    assert run.state == SyncRun.State.SUCCEEDED, run.error
    run_pending()

    # Then each note is live, titled by its `title` field, or its first heading without one
    documents = {d.key: d for d in Document.objects.filter(kb=kb)}
    for document in documents.values():
        assert Build.objects.get(document=document).state == Build.State.LIVE
    titles = {key: document.title for key, document in documents.items()}
    assert titles == {
        "share/birds/herons.md": "Herons of the marsh",
        "share/birds/egrets.md": "Nesting",
        "share/birds/ibis.md": "The sacred ibis",
    }
    # its mapped fields are its metadata
    assert documents["share/birds/herons.md"].metadata == {
        "author": "Ann Example",
        "year": "soon",
    }
    assert documents["share/birds/ibis.md"].metadata == {"year": "1850"}
    # and no chunk holds a field or a delimiter of the front matter
    texts = "\n".join(Chunk.objects.filter(kb=kb).values_list("text", flat=True))
    assert "Herons stand still" in texts and "platforms of sticks" in texts
    for field in ("title", "Ann Example", "soon", "1850", "---", "+++"):
        assert field not in texts, field
