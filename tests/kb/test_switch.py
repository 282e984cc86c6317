"""The switch: CAS on desired_revision, completeness, idempotent claims. The pipeline runs in
this process here (no crash is simulated); crash tests live in tests/fault/."""

from __future__ import annotations

import pytest

from ingestion.models import StageResult
from ingestion.pipeline.run import task_execute
from kb import storage
from kb.completeness import IncompleteBuild
from kb.models import Build, Chunk, Document, KnowledgeBase, Publication, PublicationEvent
from kb.services.base import ActionRefused
from kb.services.documents import document_create, revision_create
from kb.services.publication import build_approve, build_publish
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)


def upload(kb: KnowledgeBase, text: str, document: Document | None = None) -> int:
    stored = storage.store_bytes(text.encode())
    if document is None:
        revision = document_create(
            kb=kb,
            key="doc",
            title="Doc",
            stored=stored,
            media_type="text/plain",
            original_name="doc.txt",
        )
    else:
        revision = revision_create(
            document=document, stored=stored, media_type="text/plain", original_name="doc.txt"
        )
    return IngestionTask.objects.get(build__revision=revision).pk


def live_revision(document: Document) -> int | None:
    publication = (
        Publication.objects.filter(document=document).select_related("build__revision").first()
    )
    return publication.build.revision.number if publication else None


def test_a_late_build_of_an_older_revision_never_moves_the_pointer_back(kb: KnowledgeBase) -> None:
    task_1 = upload(kb, "First revision text about apples.")
    document = Document.objects.get(key="doc")
    task_2 = upload(kb, "Second revision text about pears.", document)

    assert task_execute(task_id=task_2, worker_id="w2") == "published"
    assert live_revision(document) == 2
    # the event for revision 1 arrives late
    assert task_execute(task_id=task_1, worker_id="w1") == "stale"

    assert live_revision(document) == 2
    stale = Build.objects.get(revision__number=1)
    assert stale.state == Build.State.SUPERSEDED
    assert "revision 2" in stale.error
    assert PublicationEvent.objects.filter(document=document).count() == 1


def test_a_duplicate_message_claims_nothing_and_changes_nothing(kb: KnowledgeBase) -> None:
    task_id = upload(kb, "Some text. " * 200)
    assert task_execute(task_id=task_id, worker_id="w1") == "published"
    chunk_ids = sorted(Chunk.objects.values_list("id", flat=True))
    events = PublicationEvent.objects.count()

    assert task_execute(task_id=task_id, worker_id="w2") == "not_claimed"

    assert sorted(Chunk.objects.values_list("id", flat=True)) == chunk_ids
    assert PublicationEvent.objects.count() == events
    assert IngestionTask.objects.get(pk=task_id).attempt == 1


def test_an_unverified_build_is_refused_and_the_live_one_keeps_serving(kb: KnowledgeBase) -> None:
    task_1 = upload(kb, "Live text. " * 300)
    document = Document.objects.get(key="doc")
    task_execute(task_id=task_1, worker_id="w1")
    kb.require_approval = True
    kb.save()
    task_2 = upload(kb, "Candidate text. " * 300, document)
    assert task_execute(task_id=task_2, worker_id="w2") == "awaiting_approval"
    candidate = Build.objects.get(revision__number=2)
    assert candidate.state == Build.State.READY and candidate.verified_at is not None
    # what a chunk write of another attempt leaves behind until it verifies again
    Build.objects.filter(pk=candidate.pk).update(verified_at=None)

    with pytest.raises(IncompleteBuild, match="not verified complete"):
        build_publish(build_id=candidate.pk, approve=True)

    assert live_revision(document) == 1


def test_a_candidate_awaiting_approval_is_superseded_by_a_newer_upload(kb: KnowledgeBase) -> None:
    task_1 = upload(kb, "Live text. " * 300)
    document = Document.objects.get(key="doc")
    task_execute(task_id=task_1, worker_id="w1")
    kb.require_approval = True
    kb.save()
    task_2 = upload(kb, "Candidate text. " * 300, document)
    assert task_execute(task_id=task_2, worker_id="w2") == "awaiting_approval"

    upload(kb, "Newer candidate text. " * 300, document)

    candidate = Build.objects.get(revision__number=2)
    assert candidate.state == Build.State.SUPERSEDED
    assert candidate.error == "revision 3 was uploaded after this one"
    with pytest.raises(ActionRefused):
        build_approve(build_id=candidate.pk, actor=None)
    assert live_revision(document) == 1


def test_the_write_stage_refuses_rows_that_do_not_match_and_the_live_build_keeps_serving(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_1 = upload(kb, "Live text. " * 300)
    document = Document.objects.get(key="doc")
    task_execute(task_id=task_1, worker_id="w1")
    task_2 = upload(kb, "Candidate text. " * 300, document)
    # an embed stage that caches nothing: the write joins no vector for the new chunks
    monkeypatch.setattr(
        "ingestion.pipeline.run.embed", lambda pieces, version, **_: {"embedded": 0}
    )

    assert task_execute(task_id=task_2, worker_id="w2") == "failed"

    candidate = Build.objects.get(revision__number=2)
    task = IngestionTask.objects.get(pk=task_2)
    assert candidate.verified_at is None
    assert task.last_error_code == "incomplete_build" and "have no embedding" in task.last_error
    assert live_revision(document) == 1


def test_the_switch_reads_no_chunk_rows(kb: KnowledgeBase) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    kb.require_approval = True
    kb.save()
    task_id = upload(kb, "Switch text. " * 400)
    assert task_execute(task_id=task_id, worker_id="w1") == "awaiting_approval"
    candidate = Build.objects.get()

    with CaptureQueriesContext(connection) as queries:
        build_publish(build_id=candidate.pk, approve=True)

    assert live_revision(candidate.document) == 1
    assert not [q["sql"] for q in queries.captured_queries if "kb_chunk" in q["sql"]]


def test_stage_results_are_recorded_once_per_stage(kb: KnowledgeBase) -> None:
    task_id = upload(kb, "Stage text. " * 50)
    task_execute(task_id=task_id, worker_id="w1")
    stages = set(
        StageResult.objects.filter(task_id=task_id, status="succeeded").values_list(
            "stage", flat=True
        )
    )
    assert stages == {"parse", "chunk", "embed", "write"}


def test_search_never_sees_a_candidate_before_the_switch(kb: KnowledgeBase) -> None:
    from retrieval.principals import Principal
    from retrieval.search.engine import search

    kb.require_approval = True
    kb.save()
    task_id = upload(kb, "Invisible candidate about zebras.")
    task_execute(task_id=task_id, worker_id="w1")
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())

    assert search(principal=principal, kb=kb, query="zebras").hits == []

    build = Build.objects.get()
    build_publish(build_id=build.pk, approve=True)
    hits = search(principal=principal, kb=kb, query="zebras").hits
    assert [h.build_id for h in hits] == [build.pk]
