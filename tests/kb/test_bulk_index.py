"""Bulk builds of a new index version (`kb.ann_build`): its chunks are written without an HNSW
index, the index is built once they all are, and only then can the version be swapped in.
Uploads during the build land in it. halfvec versions index 2-byte floats (`kb.ann`)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings

from kb import ann, ann_build
from kb.models import IndexVersion, KnowledgeBase
from kb.selectors.index_versions import (
    VersionStatus,
    index_version_progress,
    index_version_settings_record,
    index_version_status,
)
from kb.services.base import ActionRefused
from kb.services.index_versions import (
    index_version_activate,
    index_version_coverage_gaps,
    index_version_create,
)
from retrieval.principals import Principal
from retrieval.search.engine import search
from retrieval.search.vector import vector_query
from retrieval.search.visibility import search_params
from tests.conftest import wait_for
from tests.helpers import run_pending, upload_text
from work.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)  # real commits: CONCURRENTLY, on_commit

TEXTS = {
    "rivers": "Rivers carry water from the mountains to the sea through long valleys.",
    "bread": "Bread is baked from flour, water, salt and yeast in a hot oven.",
    "trains": "Night trains cross the border after midnight and arrive at dawn.",
}


def reader(kb: KnowledgeBase) -> Principal:
    return Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())


def new_version(kb: KnowledgeBase, **extra: Any) -> IndexVersion:
    return index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-bulk",
        dimensions=64,
        chunk_size=400,
        chunk_overlap=50,
        **extra,
    )


def status_of(kb: KnowledgeBase, version: IndexVersion) -> VersionStatus:
    kb.refresh_from_db()
    progress = index_version_progress(version=version)
    return index_version_status(version=version, progress=progress, kb=kb)


@pytest.fixture
def built(kb: KnowledgeBase) -> KnowledgeBase:
    for key, text in TEXTS.items():
        upload_text(kb, key, text)
    run_pending()
    return kb


# Every version here is larger than "inline": the last build's worker sends the index build
# to its own task, which no worker runs in these tests, so the gap before it is observable.
@override_settings(ANN_BUILD_INLINE_CHUNKS=-1)
def test_swap_is_refused_until_the_bulk_built_version_has_its_index(built: KnowledgeBase) -> None:
    kb = built
    v1 = kb.active_index_version
    assert v1 is not None and ann.ann_index_ready(v1.pk)  # the active version keeps its index

    # given a new version whose builds are all written, with no vector index yet
    v2 = new_version(kb)
    assert ann.ann_index_state(v2.pk) == "missing"
    run_pending()
    assert index_version_coverage_gaps(version=v2) == []
    assert ann.ann_index_state(v2.pk) == "missing"
    assert ann_build.ann_index_due(version_id=v2.pk)

    # then the admin says "building index" and offers no swap, and the swap is refused
    status = status_of(kb, v2)
    assert (status.kind, status.swappable) == ("indexing", False)
    assert status.label.startswith("building index: 3/3 built")
    with pytest.raises(ActionRefused, match="its vector index is still being built"):
        index_version_activate(version_id=v2.pk, actor=None)

    # and the admin's test search of the candidate works without its index (sequential scan)
    result = search(
        principal=reader(kb), kb=kb, query="baked flour oven", mode="vector", index_version=v2
    )
    assert result.index_version == v2.number and result.hits[0].document_key == "bread"

    # when an upload arrives before the index is built, it lands in the new version too
    upload_text(kb, "ferries", "Ferries leave the harbour every hour for the islands.")
    status = status_of(kb, v2)
    assert status.kind == "building" and not status.swappable
    run_pending()
    assert index_version_coverage_gaps(version=v2) == []

    # when the index is built (the task a worker runs)
    assert ann_build.ann_index_build(version_id=v2.pk) == "built"
    assert ann_build.ann_index_build(version_id=v2.pk) == "ready"  # idempotent

    # then the version is ready and swaps in, and serves the upload made during its build
    assert ann.ann_index_ready(v2.pk)
    status = status_of(kb, v2)
    assert (status.kind, status.swappable) == ("ready", True)
    index_version_activate(version_id=v2.pk, actor=None, expected_active_id=v1.pk)
    kb.refresh_from_db()
    result = search(principal=reader(kb), kb=kb, query="harbour islands", mode="vector")
    assert result.index_version == v2.number and result.hits[0].document_key == "ferries"
    built_event = AuditEvent.objects.get(kind="index_version_ann_built", subject_id=v2.pk)
    assert built_event.details["parallel_workers"] >= 1


@override_settings(ANN_BUILD_INLINE_CHUNKS=-1)
def test_a_second_builder_waits_for_the_first(built: KnowledgeBase) -> None:
    # given a version due for its index, whose advisory lock another session holds
    v2 = new_version(built)
    run_pending()
    assert ann_build.ann_index_due(version_id=v2.pk)
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_lock(%s, %s)", [ann_build.ANN_BUILD_LOCK_CLASS, v2.pk]
            )
        # then this builder does nothing, and the index is not built twice
        assert ann_build.ann_index_build(version_id=v2.pk) == "busy"
        assert ann.ann_index_state(v2.pk) == "missing"
    finally:
        # Unlock before closing: a closed session's locks go only when its backend has exited,
        # which the next statement here may beat (seen under load).
        with other.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_unlock(%s, %s)", [ann_build.ANN_BUILD_LOCK_CLASS, v2.pk]
            )
        other.close()
    assert ann_build.ann_index_build(version_id=v2.pk) == "built"


def test_a_small_version_is_indexed_by_the_worker_of_its_last_build(built: KnowledgeBase) -> None:
    # given a new version of three small documents (under ANN_BUILD_INLINE_CHUNKS)
    v2 = new_version(built)
    assert not ann.ann_index_ready(v2.pk)
    # when its builds run
    run_pending()
    # then the last build's worker built the index, and the swap is possible
    assert ann.ann_index_ready(v2.pk)
    assert status_of(built, v2).swappable
    index_version_activate(version_id=v2.pk, actor=None)


def test_a_halfvec_version_indexes_half_precision_and_search_uses_it(
    built: KnowledgeBase,
) -> None:
    # given a halfvec version, built and indexed
    v2 = new_version(built, vector_storage="halfvec")
    run_pending()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = %s", [ann.ann_index_name(v2.pk)]
        )
        (definition,) = cursor.fetchone()
    assert "halfvec(64)" in definition and "halfvec_cosine_ops" in definition
    index_version_activate(version_id=v2.pk, actor=None)
    built.refresh_from_db()

    # then the vector leg orders by the index's halfvec expression and the planner uses it
    result = search(principal=reader(built), kb=built, query="night trains border", mode="vector")
    assert result.hits[0].document_key == "trains"
    sql, sql_params = vector_query(
        search_params(principal=reader(built), kb=built), v2, [0.1] * 64, 2
    )
    # With sequential scans and sorts priced out, only an index that yields the order remains,
    # even on a few chunks.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("EXPLAIN " + sql, sql_params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert ann.ann_index_name(v2.pk) in plan, plan
    record = index_version_settings_record(v2)
    assert record is not None and record["vector_storage"] == "halfvec"


def test_an_unknown_vector_storage_is_refused(kb: KnowledgeBase) -> None:
    with pytest.raises(ActionRefused, match="Unknown vector storage"):
        new_version(kb, vector_storage="int8")


@pytest.mark.integration
def test_a_real_worker_builds_the_index_after_the_bulk_load(
    worker_factory: Any, kb: KnowledgeBase
) -> None:
    # given a knowledge base served by v1 and a worker that sends every index build to its task
    worker = worker_factory(CANON_ANN_BUILD_INLINE_CHUNKS="0")
    for key, text in TEXTS.items():
        upload_text(kb, key, text)
    v1 = kb.active_index_version
    assert v1 is not None
    wait_for(lambda: index_version_progress(version=v1).live == 3, what="v1 live")

    # and another builder holding v2's lock, as if its index build were running elsewhere
    v2 = new_version(kb)
    holder = connection.copy()
    try:
        with holder.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_lock(%s, %s)", [ann_build.ANN_BUILD_LOCK_CLASS, v2.pk]
            )
        wait_for(
            lambda: index_version_coverage_gaps(version=v2) == [],
            what="v2's builds written",
        )
        # then the swap is refused while the index is not there
        assert ann.ann_index_state(v2.pk) == "missing"
        with pytest.raises(ActionRefused, match="still being built"):
            index_version_activate(version_id=v2.pk, actor=None)
        # and an upload meanwhile is built into v2 as well
        upload_text(kb, "ferries", "Ferries leave the harbour every hour for the islands.")
        wait_for(
            lambda: index_version_coverage_gaps(version=v2) == [],
            what="the upload built into v2",
        )
        assert ann.ann_index_state(v2.pk) == "missing"
    finally:
        holder.close()

    # when the periodic job sends the build (the lock is free now), the worker builds the index
    from ingestion.tasks import build_ann_indexes

    assert build_ann_indexes() >= 1
    wait_for(lambda: ann.ann_index_ready(v2.pk), what="v2's index built by the worker")

    # then the swap is allowed and the new version serves every document
    index_version_activate(version_id=v2.pk, actor=None, expected_active_id=v1.pk)
    kb.refresh_from_db()
    result = search(principal=reader(kb), kb=kb, query="harbour islands", mode="vector")
    assert result.index_version == v2.number and result.hits[0].document_key == "ferries"
    assert "build_ann_index" in worker.log()


def test_the_new_version_form_offers_halfvec(kb: KnowledgeBase, admin_user: Any) -> None:
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(admin_user)
    url = reverse("admin:kb_indexversion_new", args=[kb.pk])
    # given the form, it offers both storages, vector first
    page = client.get(url).content.decode()
    assert '<option value="vector" selected>' in page and '<option value="halfvec">' in page
    # when an index admin picks halfvec, the version is created with it
    data = {"provider": "hash", "model": "", "dimensions": "", "chunk_size": 800}
    response = client.post(url, {**data, "chunk_overlap": 100, "vector_storage": "halfvec"})
    assert response.status_code == 302
    assert IndexVersion.objects.get(kb=kb, number=2).vector_storage == "halfvec"
    # and a storage it does not offer is a form error, not a version
    response = client.post(url, {**data, "chunk_overlap": 100, "vector_storage": "int8"})
    assert response.status_code == 200 and "vector_storage" in response.context["form"].errors
    assert not IndexVersion.objects.filter(kb=kb, number=3).exists()


@override_settings(ANN_BUILD_INLINE_CHUNKS=-1)
def test_an_invalid_index_left_by_a_crashed_build_is_rebuilt(built: KnowledgeBase) -> None:
    # given a version whose concurrent index build died: its index exists but is INVALID
    # (what PostgreSQL leaves behind; simulated by marking a built index invalid)
    v2 = new_version(built)
    run_pending()
    assert ann_build.ann_index_build(version_id=v2.pk) == "built"
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass",
            [ann.ann_index_name(v2.pk)],
        )
    assert ann.ann_index_state(v2.pk) == "building"
    assert status_of(built, v2).kind == "indexing"
    with pytest.raises(ActionRefused, match="still being built"):
        index_version_activate(version_id=v2.pk, actor=None)

    # when the periodic job finds it due and a builder runs
    assert v2.pk in ann_build.ann_indexes_due()
    assert ann_build.ann_index_build(version_id=v2.pk) == "built"

    # then the index was dropped and built again, valid, and the swap goes through
    assert ann.ann_index_ready(v2.pk)
    index_version_activate(version_id=v2.pk, actor=None)
