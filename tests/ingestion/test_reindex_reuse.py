"""A re-index reuses what does not change: a new index version's build takes another task's
parse and chunk results (`stage_run(shared=True)`), and when its chunks are the same pieces as
an existing build's, their postings, lengths and BM25 statistics are copied on the server
(`ingestion.pipeline.write.postings_source`) instead of analysed again. Whatever path a build takes,
its keyword index is the one analysis would have written."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from ingestion.models import StageResult
from ingestion.pipeline import write as writer
from ingestion.pipeline.run import task_execute
from kb.models import Build, IndexVersion, KnowledgeBase, LexicalStat
from kb.services.index_versions import index_version_activate, index_version_create
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.helpers import run_pending, upload_text
from textkit import analysis
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)  # the pipeline's fenced commits

TEXTS = {
    "rivers": "Rivers carry water from the mountains to the sea through long valleys. " * 30,
    "bread": "Bread is baked from flour, water, salt and yeast in a hot oven. " * 30,
    "trains": "Night trains cross the border after midnight and arrive at dawn. " * 30,
}


def run_all() -> None:
    assert set(run_pending()) <= {"published", "ready"}


def new_version(kb: KnowledgeBase, *, chunk_size: int | None = None) -> IndexVersion:
    active = kb.active_index_version
    assert active is not None
    return index_version_create(
        kb_id=kb.pk,
        provider=active.provider,
        model="canon-hash-reindexed",  # a model change: same chunks, new vectors
        dimensions=active.dimensions,
        chunk_size=chunk_size or active.chunk_size,
        chunk_overlap=active.chunk_overlap,
    )


def keyword_index(build: Build) -> dict[str, Any]:
    """The build's keyword index by chunk ordinal: postings, lengths and statistics."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.ordinal, p.term, p.tf, p.impact, p.index_version_id = c.index_version_id
            FROM kb_posting p JOIN kb_chunk c ON c.id = p.chunk_id
            WHERE c.build_id = %s ORDER BY 1, 2
            """,
            [build.pk],
        )
        postings = cursor.fetchall()
        cursor.execute(
            "SELECT ordinal, lexical_length FROM kb_chunk WHERE build_id = %s ORDER BY 1",
            [build.pk],
        )
        lengths = cursor.fetchall()
    stats = sorted(LexicalStat.objects.filter(build=build).values_list("term", "chunks", "length"))
    return {"postings": postings, "lengths": lengths, "stats": stats}


def analysed_index(build: Build) -> list[tuple[Any, ...]]:
    """What analysis of the build's chunk texts gives (the postings a fresh write would have)."""
    rows = []
    for chunk in build.chunks.order_by("ordinal"):
        piece = {"text": chunk.text, "heading_path": chunk.heading_path}
        frequencies, length = analysis.term_frequencies(writer.keyword_text(piece))
        rows += [
            (chunk.ordinal, term, min(tf, 32767), analysis.impact(tf, length), True)
            for term, tf in frequencies.items()
        ]
    return sorted(rows)


def write_output(build: Build) -> dict[str, Any]:
    result = StageResult.objects.get(task__build=build, stage="write", status="succeeded")
    return result.output


@pytest.fixture
def live(kb: KnowledgeBase) -> KnowledgeBase:
    for key, text in TEXTS.items():
        upload_text(kb, key, text)
    run_all()
    return kb


def test_a_model_change_copies_each_builds_keyword_index(live: KnowledgeBase) -> None:
    kb = live
    v1 = kb.active_index_version
    assert v1 is not None
    v2 = new_version(kb)
    run_all()
    for old in Build.objects.filter(index_version=v1):
        new = Build.objects.get(index_version=v2, document=old.document)
        assert new.verified_at is not None
        # copied, every batch of it, by the write stage
        assert write_output(new)["postings_copied_batches"] == write_output(new)["batches"] > 0
        # and what was copied is what analysis gives
        assert keyword_index(new) == keyword_index(old)
        assert keyword_index(new)["postings"] == analysed_index(new)

    # the keyword leg ranks the new version as it ranks the old one
    index_version_activate(version_id=v2.pk, actor=None)
    kb.refresh_from_db()
    reader = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    hits = search(principal=reader, kb=kb, query="flour yeast oven", mode="keyword").hits
    assert hits and hits[0].document_key == "bread"


def test_a_new_version_reuses_parse_and_chunk_results(live: KnowledgeBase) -> None:
    kb = live
    v2 = new_version(kb)
    run_all()
    # the new builds' tasks recorded no parse or chunk of their own: the first tasks' served
    v2_tasks = IngestionTask.objects.filter(build__index_version=v2)
    assert v2_tasks.count() == len(TEXTS)
    assert not StageResult.objects.filter(task__in=v2_tasks, stage__in=["parse", "chunk"]).exists()
    assert StageResult.objects.filter(task__in=v2_tasks, stage="write").count() == len(TEXTS)

    # a chunker change reuses the parse but chunks again, and analyses: no source build
    v3 = new_version(kb, chunk_size=300)
    run_all()
    v3_tasks = IngestionTask.objects.filter(build__index_version=v3)
    assert not StageResult.objects.filter(task__in=v3_tasks, stage="parse").exists()
    assert StageResult.objects.filter(task__in=v3_tasks, stage="chunk").count() == len(TEXTS)
    for build in Build.objects.filter(index_version=v3):
        assert write_output(build)["postings_copied_batches"] == 0
        assert keyword_index(build)["postings"] == analysed_index(build)


def test_a_collected_source_is_not_copied_and_the_build_is_analysed(
    live: KnowledgeBase,
) -> None:
    kb = live
    v1 = kb.active_index_version
    assert v1 is not None
    # every v1 build given up (as retention or a purge does before deleting chunks)
    Build.objects.filter(index_version=v1).update(collected_at=timezone.now())
    v2 = new_version(kb)
    run_all()
    for build in Build.objects.filter(index_version=v2):
        assert build.verified_at is not None
        assert write_output(build)["postings_copied_batches"] == 0
        assert keyword_index(build)["postings"] == analysed_index(build)


def test_a_source_collected_between_batches_finishes_by_analysis(
    live: KnowledgeBase, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = live
    settings.CHUNK_WRITE_BATCH = 2  # several batches per build
    v1 = kb.active_index_version
    assert v1 is not None
    v2 = new_version(kb)

    # after the first copied batch of each build, its source is given up
    def give_up_sources(batches: int) -> None:
        if batches == 1:
            Build.objects.filter(index_version=v1).update(collected_at=timezone.now())

    monkeypatch.setattr("work.faults.after_chunk_batch", give_up_sources)
    task_id = IngestionTask.objects.filter(status="queued").values_list("id", flat=True)[0]
    assert task_execute(task_id=task_id, worker_id="test") in ("published", "ready")
    build = Build.objects.get(tasks__id=task_id)
    assert build.index_version_id == v2.pk
    output = write_output(build)
    assert output["batches"] > 1 and output["postings_copied_batches"] == 1
    # part copied, part analysed: one keyword index, the analysed one, statistics recomputed
    index = keyword_index(build)
    assert index["postings"] == analysed_index(build)
    source = Build.objects.get(index_version=v1, document=build.document)
    assert index["stats"] == keyword_index(source)["stats"]
