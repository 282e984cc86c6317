"""Canon on a bucket, with real worker processes: an upload through the API is stored in the
bucket (not on the local disk), built and published; an outage of the store mid-parse makes the
build wait (without spending attempts) while search keeps serving, and once the store is back
the build completes. No credential appears in the worker's log."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command

from kb import storage
from kb.models import Build, KnowledgeBase, Revision
from tests.conftest import wait_for
from tests.fault.harness import live_revision, paragraphs, run_with_searcher, upload
from tests.retrieval.factories import api
from tests.s3server import ACCESS_KEY, SECRET_KEY
from work.models import IngestionTask

pytestmark = pytest.mark.integration


def test_an_api_upload_is_stored_in_the_bucket_built_and_published(
    worker_factory: Any, kb: KnowledgeBase, api_key: str, s3_storage: dict[str, str], s3_server: Any
) -> None:
    worker = worker_factory()
    client = api(api_key)
    response = client.post(
        "/api/v1/kbs/handbook/documents/",
        {
            "key": "herons",
            "file": SimpleUploadedFile("herons.md", b"# Herons\n\nGrey herons fish."),
        },
        headers={"Idempotency-Key": "s3-1"},
    )
    assert response.status_code == 201, response.content
    revision = Revision.objects.get()
    wait_for(lambda: live_revision(revision.document) == 1, what="herons live")

    bucket, prefix = s3_storage["CANON_STORAGE_URL"].removeprefix("s3://").split("/", 1)
    listed = s3_server.client().list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/")
    names = sorted(item["Key"].removeprefix(f"{prefix}/") for item in listed["Contents"])
    assert revision.storage_path in names
    assert [n.split("/")[0] for n in names] == ["derived", "sources"]  # the parse's output too
    assert not (storage.storage_root() / revision.storage_path).exists()
    hits = client.post(
        "/api/v1/search",
        {"kb": "handbook", "query": "grey herons", "mode": "keyword"},
        content_type="application/json",
    ).json()["hits"]
    assert [h["document_key"] for h in hits] == ["herons"]
    call_command("kb_verify")
    assert SECRET_KEY not in worker.log() and ACCESS_KEY not in worker.log()


def test_an_outage_mid_parse_waits_while_search_serves_then_the_build_completes(
    worker_factory: Any, kb: KnowledgeBase, s3_storage: dict[str, str], s3_server: Any
) -> None:
    # given revision 1 live, built from the bucket
    first = worker_factory(pool="solo")
    document = upload(kb, "policy", paragraphs("alpha"))
    wait_for(lambda: live_revision(document) == 1, what="revision 1 live")
    first.stop()
    # and revision 2 stored and committed, its build not started
    upload(kb, "policy", paragraphs("beta"))
    task = IngestionTask.objects.get(build__revision__number=2)
    searcher = run_with_searcher(kb, ["alpha paragraph 3", "beta paragraph 3"])

    # when the store goes away and a worker takes the build
    s3_server.stop()
    try:
        worker = worker_factory(pool="solo", CANON_RETRY_BASE_SECONDS="1")

        def waiting() -> bool:
            task.refresh_from_db()
            return task.last_error_code == "storage_unavailable" and task.status == "retry_wait"

        # then the build waits for the store, its attempt given back, and search serves r1
        wait_for(waiting, what="the build waiting for the store")
        wait_for(lambda: "waiting for the file store" in worker.log(), what="the log line")
        assert task.attempt == 0
        assert Build.objects.get(tasks=task).state == Build.State.BUILDING
        assert live_revision(document) == 1
        wait_for(lambda: searcher.searches > 20, relay=False, what="searches during the outage")
    finally:
        s3_server.start()

    # and once the store is back the build completes
    wait_for(lambda: live_revision(document) == 2, what="revision 2 live after the outage")
    searcher.stop()
    searcher.assert_clean()
    assert searcher.seen["policy"] >= {1}
    task.refresh_from_db()
    assert (task.status, task.attempt) == ("succeeded", 1)
    log = worker.log()
    assert "is unreachable" in log
    assert SECRET_KEY not in log and ACCESS_KEY not in log
    call_command("kb_verify")
