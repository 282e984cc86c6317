"""Helpers for the API tests: publish documents through the real pipeline, call the API."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.test import Client
from django.utils import timezone

from kb import storage
from kb.models import Build, Document, KnowledgeBase, Publication, Revision
from kb.services.documents import document_create, revision_create
from retrieval.search.hits import Hit
from sources.services.runs import sync_request
from sources.services.sources import source_save
from tests.helpers import execute_here
from work.models import IngestionTask


def upload(
    kb: KnowledgeBase, key: str, text: str, groups: tuple[str, ...] = (), title: str = ""
) -> Revision:
    """A new document (or, if `key` exists, a new revision), not built yet."""
    stored = storage.store_bytes(text.encode())
    document = Document.objects.filter(kb=kb, key=key).first()
    if document is not None:
        return revision_create(
            document=document, stored=stored, media_type="text/plain", original_name=f"{key}.txt"
        )
    return document_create(
        kb=kb,
        key=key,
        title=title or key.title(),
        stored=stored,
        media_type="text/plain",
        original_name=f"{key}.txt",
        access_groups=groups,
    )


def build(revision: Revision) -> Build:
    """Run the revision's build task in this process (what a worker does); return the build."""
    task = IngestionTask.objects.get(build__revision=revision)
    # Inside a test's transaction the database clock stands still at the test's start, before
    # the task's `available_at`; make it available "now" as it would be for a worker.
    IngestionTask.objects.filter(pk=task.pk).update(available_at=None)
    outcome = execute_here(task.pk)
    if outcome == "not_claimed":  # a real worker the test runs claimed it first: its outcome
        outcome = _outcome_of_worker(revision)
    assert outcome in ("published", "awaiting_approval"), outcome
    return Build.objects.get(revision=revision)


def _outcome_of_worker(revision: Revision, timeout: float = 60.0) -> str:
    """What became of the revision's build in another process: "published" once live,
    "awaiting_approval" once ready for a person, else its state after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        state = Build.objects.get(revision=revision).state
        if state == Build.State.LIVE:
            return "published"
        if state == Build.State.READY:
            return "awaiting_approval"
        if state == Build.State.FAILED or time.monotonic() > deadline:
            return f"not_claimed, then {state} in another worker"
        time.sleep(0.2)


def publish(kb: KnowledgeBase, key: str, text: str, groups: tuple[str, ...] = ()) -> Build:
    """Upload and build: the new revision is live when this returns."""
    built = build(upload(kb, key, text, groups))
    assert built.state == Build.State.LIVE, built.state
    return built


def api(key: str | None = None, **extra: Any) -> Client:
    """A client that sends `Authorization: Bearer <key>` with every request."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return Client(headers=headers, **extra)


def search(client: Client, body: dict[str, Any]) -> Any:
    return client.post("/api/v1/search", body, content_type="application/json")


def live_builds_without_chunks(kb: KnowledgeBase, *, documents: int, chunks: int) -> list[Build]:
    """`documents` live documents `doc-0`.. of the active version, each with a live build that
    expects `chunks` chunks (the caller inserts them in bulk). Only doc-0 has no access group;
    the rest need `secret`."""
    version = kb.active_index_version
    assert version is not None
    rows = Document.objects.bulk_create(
        Document(
            kb=kb,
            key=f"doc-{i}",
            title=f"Doc {i}",
            access_groups=[] if i == 0 else ["secret"],
            desired_revision=1,
        )
        for i in range(documents)
    )
    revisions = Revision.objects.bulk_create(
        Revision(
            document=d, number=1, storage_path="-", sha256="0" * 64, size=1, media_type="text/plain"
        )
        for d in rows
    )
    builds = Build.objects.bulk_create(
        Build(
            kb=kb,
            document=d,
            revision=r,
            index_version=version,
            state="live",
            expected_chunk_count=chunks,
            dimensions=version.dimensions,
        )
        for d, r in zip(rows, revisions, strict=True)
    )
    now = timezone.now()
    Publication.objects.bulk_create(
        Publication(kb=kb, document=d, index_version=version, build=b, published_at=now)
        for d, b in zip(rows, builds, strict=True)
    )
    return builds


def source_with_run(kb: KnowledgeBase, folder: Path, settings: Any) -> tuple[Any, Any]:
    """A folder source of `kb` over `folder` (allowed as a root) and a queued sync run of it,
    for the tests that walk every API operation (the sources' paths name both)."""
    folder.mkdir(parents=True, exist_ok=True)
    settings.SOURCES_FOLDER_ROOTS = [*settings.SOURCES_FOLDER_ROOTS, str(folder)]
    source = source_save(
        kb=kb, name="Share", slug="share", kind="folder", config={"path": str(folder)}
    )
    run, _ = sync_request(source=source)
    return source, run


def question_set_with_run(kb: KnowledgeBase) -> tuple[Any, Any]:
    """A question set of `kb` with one question and a queued evaluation run of it, for the
    tests that walk every API operation (evaluation's paths name both)."""
    from evaluation.models import Question
    from evaluation.services.question_sets import question_set_create
    from evaluation.services.runs import evaluation_request
    from kb.access import Reader

    question_set = question_set_create(kb=kb, name="Probe questions")
    Question.objects.create(
        question_set=question_set,
        external_id="probe",
        text="probe question",
        expected_keys=["probe"],
        language="en",
    )
    run, _ = evaluation_request(
        kb=kb,
        question_set=question_set,
        modes=["keyword"],
        reader=Reader(tenant_id=kb.tenant_id, access_groups=frozenset(), all_groups=True),
    )
    return question_set, run


def calibration_of(question_set: Any) -> Any:
    """A computed calibration (a candidate a key may adopt) of `question_set` on its knowledge
    base's active version, written as `calibration_compute` would write it, for the tests
    that walk every API operation (evaluation's calibration paths name it). Its parameters are
    the default's (adopting it changes no ranking); its one question is the set's first, which
    the candidate's held-out ranking answers and the default's misses."""
    from evaluation.calibration import default_sha256
    from evaluation.models import Calibration
    from retrieval.search import fusion
    from retrieval.search.fusion_fitting import parameters_of

    question = question_set.questions.order_by("pk").first()
    kb = question_set.kb
    return Calibration.objects.create(
        kb=kb,
        question_set=question_set,
        question_set_version=question_set.version,
        index_version_id=kb.active_index_version_id,
        state=Calibration.State.CANDIDATE,
        default_sha256=default_sha256(),
        parameters=parameters_of(fusion.model(), l2=1.0, questions=1),  # the default's
        l2=1.0,
        questions=1,
        teaching=1,
        default_mrr=0.0,
        candidate_mrr=1.0,
        folds=[{"n": 1, "default_mrr": 0.0, "candidate_mrr": 1.0}],
        per_question=[
            {
                "question": question.pk,
                "external_id": question.external_id,
                "text": question.text,
                "expected": list(question.expected_keys),
                "default": ["elsewhere"],
                "candidate": list(question.expected_keys),
            }
        ],
        computed_at=timezone.now(),
    )


def hit(chunk_id: int, score: float) -> Hit:
    """A bare hit for ranking tests: chunk `chunk_id` of document d<chunk_id>."""
    return Hit(
        chunk_id=chunk_id,
        score=score,
        text="",
        ordinal=0,
        document_key=f"d{chunk_id}",
        document_title="",
        revision=1,
        build_id=1,
    )
