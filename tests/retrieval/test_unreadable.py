"""Nothing a caller may not read is told apart from what does not exist (RELIABILITY.md,
Security; issue 14, item 2): every API operation with a path parameter, found by walking the
URL resolver, is asked about objects of another tenant, of a knowledge base outside the key's
scope and of an access group the key lacks, and must answer exactly as for a missing id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from kb.models import Build, Document, KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import api_key_create
from tests.retrieval.factories import (
    api,
    calibration_of,
    publish,
    question_set_with_run,
    source_with_run,
)
from tests.retrieval.routes import Operation, api_operations, call

pytestmark = pytest.mark.django_db

MISSING = 10**12


@pytest.fixture
def world(kb: KnowledgeBase, settings: Any, tmp_path: Path) -> dict[str, dict[str, str]]:
    """Per path parameter: reason -> a ref the key (scoped to `handbook`, no groups) may not
    read. Its own readable document exists too, so the answers are not empty by accident."""
    publish(kb, "open", "Open policy text.")
    restricted = publish(kb, "payroll", "Salaries by person.", groups=("hr",))
    manual = knowledge_base_create(tenant=kb.tenant, name="Manual", slug="manual")
    out_of_scope = publish(manual, "valves", "Valve maintenance.")
    rival = Tenant.objects.create(name="Rival", slug="rival")
    rival_kb = knowledge_base_create(tenant=rival, name="Handbook", slug="handbook")
    foreign = publish(rival_kb, "merger", "The merger plan.")

    def refs(build: Build) -> tuple[str, str]:
        return str(build.document_id), str(build.chunks.get(ordinal=0).pk)

    # A revision number names nothing on its own: its document is what is scoped.
    world: dict[str, dict[str, str]] = {
        "kb": {},
        "document_id": {},
        "chunk_id": {},
        "revision": {},
        "vector_store_id": {},  # retrieval.compat's name for a knowledge base
        "source_id": {},
        "run_id": {},  # of the readable source: a run of another source is not its run
        "question_set_id": {},
        "evaluation_id": {},
        "other_id": {},  # the run compared with: scoped like evaluation_id
        "calibration_id": {},
    }
    for reason, build in [
        ("access group", restricted),
        ("knowledge base outside the key's scope", out_of_scope),
        ("another tenant", foreign),
    ]:
        world["document_id"][reason], world["chunk_id"][reason] = refs(build)
    world["kb"]["knowledge base outside the key's scope"] = str(manual.pk)
    world["kb"]["knowledge base outside the key's scope, by slug"] = "manual"
    world["kb"]["another tenant"] = str(rival_kb.pk)
    world["vector_store_id"] = world["kb"]
    own, _ = source_with_run(kb, tmp_path / "own", settings)
    for reason, place in [
        ("knowledge base outside the key's scope", manual),
        ("another tenant", rival_kb),
    ]:
        source, run = source_with_run(place, tmp_path / place.tenant.slug / place.slug, settings)
        world["source_id"][reason] = str(source.pk)
        world["run_id"][f"a run of a source in a {reason}"] = str(run.pk)
    own_set, own_evaluation = question_set_with_run(kb)
    for reason, place in [
        ("knowledge base outside the key's scope", manual),
        ("another tenant", rival_kb),
    ]:
        question_set, evaluation = question_set_with_run(place)
        world["question_set_id"][reason] = str(question_set.pk)
        world["evaluation_id"][reason] = str(evaluation.pk)
        world["other_id"][reason] = str(evaluation.pk)
        world["calibration_id"][reason] = str(calibration_of(question_set).pk)
    world["readable"] = {
        "source_id": str(own.pk),
        "run_id": str(own.runs.get().pk),
        "question_set_id": str(own_set.pk),
        "evaluation_id": str(own_evaluation.pk),
        "other_id": str(own_evaluation.pk),
        "calibration_id": str(calibration_of(own_set).pk),
    }
    return world


@pytest.fixture
def client(kb: KnowledgeBase) -> Client:
    _, plaintext = api_key_create(tenant=kb.tenant, name="scoped", knowledge_bases=[kb])
    return api(plaintext, raise_request_exception=False)


def ask(client: Client, operation: Operation, path: str) -> Any:
    if operation.name == "openai-vector-store-search":  # retrieval.compat: a search
        return client.post(path, {"query": "valves"}, content_type="application/json")
    if operation.method == "post":  # an upload; any valid one
        return client.post(
            path,
            {"key": "probe", "file": SimpleUploadedFile("probe.txt", b"probe")},
            headers={"Idempotency-Key": "probe"},
        )
    return call(client, operation, path)


def test_every_operation_answers_unreadable_like_missing(
    client: Client, world: dict[str, dict[str, str]]
) -> None:
    operations = [op for op in api_operations() if op.params]
    assert operations
    checked = 0
    for operation in operations:
        for name in operation.params:
            assert name in world, f"{operation}: teach this test what {name!r} names"
            readable = {
                "kb": "handbook",
                "document_id": "1",
                "chunk_id": "1",
                "revision": "1",
                "vector_store_id": "handbook",
                **world["readable"],
            }
            missing_ref = "no-such-kb" if name in ("kb", "vector_store_id") else str(MISSING)
            missing = ask(client, operation, operation.path({**readable, name: missing_ref}))
            assert missing.status_code == 404, (str(operation), missing.content)
            for reason, ref in world[name].items():
                theirs = ask(client, operation, operation.path({**readable, name: ref}))
                label = f"{operation} {name}: {reason}"
                assert theirs.status_code == 404, (label, theirs.content)
                # the missing id's answer with the id swapped (and only the id: another id in
                # the message, the readable source's, may be spelled like `ref`)
                assert theirs.content == missing.content.replace(
                    missing_ref.encode(), ref.encode()
                ), label
                checked += 1
    assert checked >= 10
    assert not Document.objects.filter(deleted_at__isnull=False).exists(), "nothing deleted"
    assert not Document.objects.filter(key="probe").exists(), "nothing uploaded"
