"""A searcher thread queries the API without pause while this process republishes documents
through the real pipeline. No result set may mix builds of one document, show a build that was
never published, show part of a build, or go back to an older revision.

The pipeline is held at its own checkpoints (after each committed chunk batch, before the
switch) until the searcher has run complete searches there, so searches provably overlap
half-written and finished-but-unswitched candidates: no sleeps, no timing."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connection

from kb.models import Build, Publication, PublicationEvent, Tenant
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import api_key_create
from tests.retrieval.factories import api, build, publish, search, upload
from work import faults

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENTS = ("alpha", "beta", "gamma")
REVISIONS = 3  # republished twice each
PARAGRAPHS = 4


def text(document: str, revision: int) -> str:
    return "\n\n".join(
        f"Canon {document} revision {revision} paragraph {p} says something useful."
        for p in range(PARAGRAPHS)
    )


@dataclass
class Observation:
    builds: dict[str, list[int]]  # document key -> build ids of its hits
    expected: dict[str, int] | None  # the live builds, when no switch could happen meanwhile


@dataclass
class Checkpoints:
    """The pipeline's checkpoints wait here until the searcher has searched at them."""

    condition: threading.Condition = field(default_factory=threading.Condition)
    searches: int = 0
    epoch: int = 0
    frozen: bool = False
    expected: dict[str, int] = field(default_factory=dict)
    held: int = 0
    errors: list[BaseException] = field(default_factory=list)

    def hold(self, *_: Any) -> None:
        live = dict(
            Publication.objects.filter(document__key__in=DOCUMENTS).values_list(
                "document__key", "build_id"
            )
        )
        with self.condition:
            self.epoch += 1
            self.frozen, self.expected = True, live
            target = self.searches + 2  # at least one search that starts after this point
            done = self.condition.wait_for(
                lambda: self.searches >= target or bool(self.errors), timeout=120
            )
            self.frozen = False
            self.held += 1
        assert done and not self.errors, f"the searcher stopped: {self.errors}"


def searcher(
    key: str, checkpoints: Checkpoints, stop: threading.Event, seen: list[Observation]
) -> None:
    client = api(key)
    modes = ("keyword", "vector", "hybrid")
    try:
        while not stop.is_set():
            with checkpoints.condition:
                start = (checkpoints.epoch, checkpoints.frozen, dict(checkpoints.expected))
            response = search(
                client,
                {"kb": "live", "query": "canon", "top_k": 100, "mode": modes[len(seen) % 3]},
            )
            assert response.status_code == 200, response.content
            builds: dict[str, list[int]] = {}
            for hit in response.json()["hits"]:
                builds.setdefault(hit["document_key"], []).append(hit["build_id"])
            with checkpoints.condition:
                still = checkpoints.epoch == start[0] and checkpoints.frozen and start[1]
                seen.append(Observation(builds, start[2] if still else None))
                checkpoints.searches += 1
                checkpoints.condition.notify_all()
    except BaseException as exc:
        with checkpoints.condition:
            checkpoints.errors.append(exc)
            checkpoints.condition.notify_all()
    finally:
        connection.close()


def test_search_never_mixes_builds_while_documents_are_republished(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.CHUNK_SIZE, settings.CHUNK_OVERLAP, settings.CHUNK_WRITE_BATCH = 80, 0, 2
    settings.CANON_API_RATE = "1000000/min"
    tenant = Tenant.objects.create(name="Acme", slug="acme")
    kb = knowledge_base_create(tenant=tenant, name="Live", slug="live")
    _, key = api_key_create(tenant=tenant, name="searcher")
    for document in DOCUMENTS:
        publish(kb, document, text(document, 1))
    checkpoints = Checkpoints()
    seen: list[Observation] = []
    stop = threading.Event()
    thread = threading.Thread(target=searcher, args=(key, checkpoints, stop, seen))

    thread.start()
    try:
        monkeypatch.setattr(faults, "after_chunk_batch", checkpoints.hold)
        monkeypatch.setattr(faults, "before_switch", checkpoints.hold)
        for revision in range(2, REVISIONS + 1):
            for document in DOCUMENTS:
                checkpoints.hold()  # between the previous switch and this upload
                build(upload(kb, document, text(document, revision)))
        checkpoints.hold()
    finally:
        stop.set()
        thread.join(60)

    assert not checkpoints.errors
    published = set(
        PublicationEvent.objects.filter(action="publish").values_list("build_id", flat=True)
    )
    chunks = dict(Counter(Build.objects.filter(kb=kb).values_list("chunks__build_id", flat=True)))
    revision_of = dict(Build.objects.filter(kb=kb).values_list("pk", "revision__number"))
    latest: dict[str, int] = {}
    exact = 0
    for observation in seen:
        for document, builds in observation.builds.items():
            assert len(set(builds)) == 1, f"{document} mixes builds {set(builds)}"
            build_id = builds[0]
            assert build_id in published, f"{document}: build {build_id} was never published"
            assert len(builds) == chunks[build_id], f"{document}: part of build {build_id}"
            assert revision_of[build_id] >= latest.get(document, 0), f"{document} went back"
            latest[document] = revision_of[build_id]
        if observation.expected is not None:
            exact += 1
            assert {d: b[0] for d, b in observation.builds.items()} == observation.expected
    # each checkpoint (after every chunk batch, before every switch, between republishes) had
    # a search that ran entirely while the pipeline stood there
    assert checkpoints.held >= len(DOCUMENTS) * (REVISIONS - 1) * 3 + 1
    assert exact >= checkpoints.held
    assert latest == dict.fromkeys(DOCUMENTS, REVISIONS)
