"""A swap with known failures (issue 26, item 1): a candidate index version that serves every
document the active one serves may be swapped in although some documents failed in it, when
they failed in the active version too (a file no parser can read); one that would serve a
document worse may not, and says which and what to do. Search sees exactly what it saw before
for those documents, and one complete published version of every other one."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from kb import locks, storage
from kb.models import Build, Document, IndexVersion, KnowledgeBase, Revision
from kb.selectors.index_versions import (
    index_version_coverage,
    index_version_progress,
    index_version_status,
)
from kb.services.base import ActionRefused
from kb.services.documents import build_retry, document_create, revision_create
from kb.services.index_versions import (
    index_version_activate,
    index_version_coverage_gaps,
    index_version_create,
)
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.helpers import run_pending
from tests.kb.publishing import publish
from textkit import extract as extractors
from work.models import AuditEvent, IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)

BROKEN_PDF = b"%PDF-1.4\n" + b"\x00garbage" * 100


def upload_broken(kb: KnowledgeBase, key: str) -> Revision:
    """A truncated PDF: every version's parse stage fails on it."""
    stored = storage.store_bytes(BROKEN_PDF)
    document = Document.objects.filter(kb=kb, key=key).first()
    if document is not None:
        return revision_create(
            document=document,
            stored=stored,
            media_type=extractors.APPLICATION_PDF,
            original_name=f"{key}.pdf",
        )
    return document_create(
        kb=kb,
        key=key,
        title="",
        stored=stored,
        media_type=extractors.APPLICATION_PDF,
        original_name=f"{key}.pdf",
    )


def new_version(kb: KnowledgeBase) -> IndexVersion:
    return index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-small",
        dimensions=128,
        chunk_size=400,
        chunk_overlap=50,
    )


def fail_build(build: Build, error: str) -> None:
    """The build failed for good (as after a provider's refusal), without running it."""
    Build.objects.filter(pk=build.pk).update(state=Build.State.FAILED, error=error)
    IngestionTask.objects.filter(build=build).update(status=IngestionTask.Status.FAILED)


def status_of(kb: KnowledgeBase, version: IndexVersion) -> tuple[str, str, bool]:
    kb.refresh_from_db()
    status = index_version_status(
        version=version, progress=index_version_progress(version=version), kb=kb
    )
    return status.kind, status.label, status.swappable


def served_keys(kb: KnowledgeBase, query: str) -> set[str]:
    kb.refresh_from_db()
    reader = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    return {hit.document_key for hit in search(principal=reader, kb=kb, query=query).hits}


def test_a_file_that_fails_in_both_versions_does_not_block_the_swap(kb: KnowledgeBase) -> None:
    # given two served documents and a truncated PDF that failed in v1
    publish(kb, "travel", "Train tickets are reimbursed in second class.")
    publish(kb, "leave", "Paid leave is twenty-five days a year.")
    broken = upload_broken(kb, "scan")
    run_pending()
    assert Build.objects.get(revision=broken).state == Build.State.FAILED
    v1 = kb.active_index_version
    assert v1 is not None

    # when v2 is built, the PDF fails there too
    v2 = new_version(kb)
    assert status_of(kb, v2)[0] == "building"
    run_pending()

    # then v2 is ready and names the failure it shares with v1
    assert status_of(kb, v2) == ("ready", "ready: 2/3 built; 1 failed as in v1", True)
    coverage = index_version_coverage(version=v2, kb=kb)
    assert (coverage.total, coverage.covered, coverage.running) == (3, 2, 0)
    assert coverage.blocking == [] and index_version_coverage_gaps(version=v2) == []
    (known,) = coverage.tolerated
    assert (known.key, known.cause, known.served_now, known.served_after) == (
        "scan",
        "failed",
        None,
        None,
    )
    assert known.reason == "r1 failed in v2; v1 does not serve it either"
    assert "damaged or truncated" in known.error

    # and the swap goes ahead: search serves v2, the PDF exactly as before (not at all)
    before = served_keys(kb, "reimbursed leave scan")
    index_version_activate(version_id=v2.pk, actor=None, expected_active_id=v1.pk)
    kb.refresh_from_db()
    assert kb.active_index_version_id == v2.pk
    assert served_keys(kb, "reimbursed leave scan") == before == {"travel", "leave"}
    swap = AuditEvent.objects.get(kind="index_version_swap")
    assert swap.details["not_served"] == [broken.document_id]
    assert "served as before: 1 document whose current revision failed in both" in swap.action
    call_command("kb_verify")


def test_a_revision_that_fails_in_both_keeps_the_earlier_one_served_after_the_swap(
    kb: KnowledgeBase,
) -> None:
    # given r1 served, then r2 (a truncated PDF) failed in v1 while r1 keeps serving
    publish(kb, "handbook", "Night trains are reimbursed in sleeper class.")
    v2 = new_version(kb)
    run_pending()
    upload_broken(kb, "handbook")
    run_pending()  # r2 fails in v1 and in v2; both serve r1
    v1 = kb.active_index_version
    assert v1 is not None

    (known,) = index_version_coverage(version=v2, kb=kb).tolerated
    assert known.reason == "r2 failed in v2; v1 serves r1, and so will v2"
    assert status_of(kb, v2)[2]
    index_version_activate(version_id=v2.pk, actor=None, expected_active_id=v1.pk)
    kb.refresh_from_db()
    reader = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    (hit,) = search(principal=reader, kb=kb, query="sleeper").hits[:1]
    assert (hit.document_key, hit.revision) == ("handbook", 1)
    call_command("kb_verify")


def test_a_candidate_that_would_serve_a_document_worse_may_not_be_swapped_in(
    kb: KnowledgeBase,
) -> None:
    # given two served documents, and v2 in which one of them failed (a provider's refusal)
    publish(kb, "travel", "Train tickets are reimbursed in second class.")
    publish(kb, "leave", "Paid leave is twenty-five days a year.")
    v1 = kb.active_index_version
    assert v1 is not None
    v2 = new_version(kb)
    failing = Build.objects.get(index_version=v2, document__key="leave")
    fail_build(failing, "the provider refused the input")
    run_pending()

    # then v2 is stuck, and says why and what to do
    kind, label, swappable = status_of(kb, v2)
    assert (kind, swappable) == ("incomplete", False)
    assert label == "incomplete: 1/2 built; 1 failed that v1 serves: retry, fix or delete it"
    (worse,) = index_version_coverage(version=v2, kb=kb).blocking
    assert worse.reason == "r1 failed in v2, but v1 serves r1: the swap would stop serving it"
    assert worse.way_out.startswith("retry its build")
    with pytest.raises(ActionRefused, match="leave: r1 failed in v2, but v1 serves r1"):
        index_version_activate(version_id=v2.pk, actor=None, expected_active_id=v1.pk)
    kb.refresh_from_db()
    assert kb.active_index_version_id == v1.pk

    # when the build is retried and succeeds, v2 is ready
    build_retry(build_id=failing.pk)
    run_pending()
    assert status_of(kb, v2) == ("ready", "ready: 2/2 built", True)


def test_a_failure_while_the_active_version_still_builds_the_document_waits_for_it(
    kb: KnowledgeBase,
) -> None:
    publish(kb, "travel", "Train tickets are reimbursed in second class.")
    v2 = new_version(kb)
    run_pending()
    revision = upload_broken(kb, "scan")  # queued in v1 and v2
    fail_build(Build.objects.get(revision=revision, index_version=v2), "cannot parse")

    (waiting,) = index_version_coverage(version=v2, kb=kb).blocking
    assert (waiting.cause, waiting.reason) == (
        "waiting",
        "r1 failed in v2, while it is being built in v1",
    )
    assert "1 still building or awaiting approval in v1: wait" in status_of(kb, v2)[1]

    run_pending()  # v1 fails it too: now the failure is shared
    assert status_of(kb, v2)[0] == "ready"


def test_the_swap_holds_the_known_failures_documents_until_it_commits(
    kb: KnowledgeBase,
) -> None:
    """Lock order knowledge base -> document: while another transaction holds the failed
    document (a switch publishing it), the swap waits instead of judging a state that is
    about to change."""
    publish(kb, "travel", "Train tickets are reimbursed in second class.")
    broken = upload_broken(kb, "scan")
    v2 = new_version(kb)
    run_pending()
    held = threading.Event()
    release = threading.Event()

    def hold_document() -> None:
        try:
            with transaction.atomic():
                locks.lock_document(broken.document_id)
                held.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_document)
    holder.start()
    assert held.wait(10)
    outcome: list[str] = []

    def swap() -> None:
        try:
            index_version_activate(version_id=v2.pk, actor=None)
            outcome.append("swapped")
        finally:
            connection.close()

    swapper = threading.Thread(target=swap)
    swapper.start()
    time.sleep(1.0)
    assert outcome == []  # waiting for the document
    release.set()
    holder.join(10)
    swapper.join(30)
    assert outcome == ["swapped"]
    kb.refresh_from_db()
    assert kb.active_index_version_id == v2.pk
