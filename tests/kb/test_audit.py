"""Reconciliation that scales (kb.audit): a shard summary that disagrees sends a deep check into
exactly its window's builds, which finds the injected damage; a sliced kb_verify killed in the
middle of a slice resumes and, over the pass, checks every document exactly once; a slice reads
a bounded number of documents with a fixed number of statements, whatever the database holds."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ingestion.pipeline.run import task_execute
from ingestion.reconciler.runner import reconcile
from kb import audit, verify
from kb.models import AuditCursor, AuditSlice, Build, BuildSeal, Chunk, Document, KnowledgeBase
from tests.conftest import ROOT, database_url
from tests.helpers import upload_task, upload_text
from work.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)


def built(kb: KnowledgeBase, n: int) -> list[Build]:
    """n documents built live by the pipeline, each a few chunks."""
    for i in range(n):
        task = upload_task(kb, f"doc{i}", f"Paragraph {i} about herons and egrets. " * 60)
        assert task_execute(task_id=task.pk, worker_id="w") == "published"
    return list(Build.objects.filter(kb=kb).order_by("id"))


def documents_in(after: tuple[int, int], through: tuple[int, int]) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM kb_document WHERE (kb_id, id) > (%s, %s) AND (kb_id, id) <= (%s, %s) "
            "ORDER BY kb_id, id",
            [*after, *through],
        )
        return [row[0] for row in cursor.fetchall()]


def test_a_disagreeing_summary_sends_a_deep_check_into_its_window_only(
    kb: KnowledgeBase, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.AUDIT_WINDOW_BUILDS = 2
    builds = built(kb, 6)
    damaged, sealed = audit.seal_pending(chunk_budget=10**9)
    assert (damaged, sealed) == ([], 6)
    everything = {"after_build": 0, "through_build": builds[-1].pk}
    assert all(s.agrees for s in audit.shard_summaries(**everything))

    # a chunk of one live build is lost; another build's chunk has its content changed
    lost, altered = builds[1], builds[4]
    Chunk.objects.filter(build=lost, ordinal=0).delete()
    Chunk.objects.filter(build=altered, ordinal=1).update(content_hash="0" * 64)

    disagreeing = [s for s in audit.shard_summaries(**everything) if not s.agrees]
    assert [(s.first_build <= lost.pk <= s.last_build) for s in disagreeing] == [True, False]
    assert disagreeing[0].chunks == disagreeing[0].expected_chunks - 1
    assert disagreeing[1].first_build <= altered.pk <= disagreeing[1].last_build
    assert disagreeing[1].chunks == disagreeing[1].expected_chunks  # only the digest tells

    read: list[int] = []
    original = audit.builds_check

    def reading(build_ids: list[int]) -> list[audit.BuildCheck]:
        read.extend(build_ids)
        return original(build_ids)

    monkeypatch.setattr(audit, "builds_check", reading)
    result = audit.shard_slice(builds=10**6, deep_windows=10)

    window = settings.AUDIT_WINDOW_BUILDS
    in_windows = [
        b.pk for b in builds if b.pk // window in (lost.pk // window, altered.pk // window)
    ]
    assert sorted(read) == in_windows  # the deep check paged only the two windows' builds
    assert len(in_windows) < len(builds)
    assert {c.build_id for c in result.damaged} == {lost.pk, altered.pk}
    assert result.deep_checked_builds == len(in_windows)
    monkeypatch.undo()

    # the reconciler escalates both as visibility violations (never repaired)
    assert reconcile()["visibility_violation"] == 2
    events = AuditEvent.objects.filter(kind="anomaly:visibility_violation").order_by("subject_id")
    assert [e.escalated for e in events] == [True, True]
    details = " | ".join(e.details["detail"] for e in events)
    assert "chunks are written" in details and "manifest hash" in details
    assert set(BuildSeal.objects.filter(ok=False).values_list("build_id", flat=True)) == {
        lost.pk,
        altered.pk,
    }
    # the damaged builds are out of the summaries now; escalated once, never again
    assert all(s.agrees for s in audit.shard_summaries(**everything))
    reconcile()
    assert AuditEvent.objects.filter(kind="anomaly:visibility_violation").count() == 2


def test_a_sliced_audit_killed_in_a_slice_resumes_and_checks_every_document_once(
    kb: KnowledgeBase, settings: Any
) -> None:
    built(kb, 2)
    for i in range(2, 9):
        upload_text(kb, f"doc{i}", f"Not built yet {i}.")
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CANON_STORAGE_ROOT": str(settings.STORAGE_ROOT),
        "CANON_FAULT_AUDIT_SLICE_EXIT": "3",  # os._exit in the third slice, before its commit
    }
    killed = subprocess.run(
        [sys.executable, "manage.py", "kb_verify", "--slice-size", "2", "--slices", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == 137, killed.stdout + killed.stderr
    assert killed.stdout.count("slice:") == 2  # two slices committed, the third died
    assert AuditSlice.objects.filter(cursor="kb_verify").count() == 2

    call_command("kb_verify", "--slice-size", "2", "--resume", "--slices", "0")

    slices = list(AuditSlice.objects.filter(cursor="kb_verify", pass_number=1).order_by("id"))
    covered = [
        doc
        for s in slices
        for doc in documents_in((s.after_kb, s.after_id), (s.through_kb, s.through_id))
    ]
    assert covered == list(Document.objects.order_by("kb_id", "id").values_list("id", flat=True))
    assert sum(s.items for s in slices) == 9 and len(set(covered)) == 9
    assert [s.last_of_pass for s in slices] == [False] * (len(slices) - 1) + [True]
    assert all(s.violations == [] for s in slices)
    cursor = AuditCursor.objects.get(pk="kb_verify")
    assert (cursor.pass_number, cursor.position_id) == (2, 0)  # the next pass starts over


def test_a_slice_is_bounded_and_finds_only_what_is_in_its_range(kb: KnowledgeBase) -> None:
    builds = built(kb, 5)
    Chunk.objects.filter(build=builds[4], ordinal=0).delete()  # in the last document only

    first = audit.audit_slice(walker="test", size=2)  # starts the pass: global checks too
    assert first.documents == 2 and not first.last_of_pass
    assert first.violations == []  # the damage is outside these two documents
    with CaptureQueriesContext(connection) as small:
        assert audit.audit_slice(walker="test", size=1).documents == 1

    for i in range(5, 25):
        upload_text(kb, f"more{i}", f"Text {i}.")
    with CaptureQueriesContext(connection) as large:
        assert audit.audit_slice(walker="test", size=1).documents == 1
    assert len(large.captured_queries) == len(small.captured_queries)  # not the table's size
    assert all(
        "LIMIT" in q["sql"] or "(kb_id, id) >" in q["sql"] or "d.kb_id, d.id) >" in q["sql"]
        for q in large.captured_queries
        if "kb_document" in q["sql"]
    )

    result = audit.audit_slice(walker="test", size=2)  # documents 5 and 6: builds[4]'s is 5th
    assert any(v.check == "live-build-complete" for v in result.violations)
    assert {v.document_id for v in result.violations} == {builds[4].document_id}


def test_a_reconciler_pass_records_its_levels_and_walks_one_slice(
    kb: KnowledgeBase, settings: Any
) -> None:
    settings.RECONCILER_SLICE_DOCUMENTS = 2
    built(kb, 3)

    reconcile()

    levels = AuditEvent.objects.filter(kind="reconciler_pass").latest("id").details["levels"]
    assert set(levels) == {"event", "document", "shard"}
    assert levels["event"]["dead_letters_of_waiting_tasks"] == 0
    assert levels["event"]["outbox_pending"] == 3  # built here without the relay
    assert levels["document"]["builds_sealed"] == 3
    assert levels["document"]["walk_documents"] == 2
    assert levels["shard"]["windows"] >= 1 and levels["shard"]["disagreeing"] == []
    reconcile()
    walk = AuditSlice.objects.filter(cursor="reconciler").order_by("id")
    assert [s.items for s in walk] == [2, 1]  # then the pass is complete
    assert walk.last().last_of_pass  # type: ignore[union-attr]


def test_a_sliced_pass_reports_what_the_whole_audit_reports(kb: KnowledgeBase) -> None:
    builds = built(kb, 4)
    Chunk.objects.filter(build=builds[0], ordinal=0).delete()
    Chunk.objects.filter(build=builds[3], ordinal=1).update(content_hash="0" * 64)
    whole = sorted(str(v) for v in verify.verify())
    assert len(whole) >= 3  # two incomplete builds, a keyword-index count

    sliced: list[str] = []
    while True:
        result = audit.audit_slice(walker="compare", size=1)
        sliced += [str(v) for v in result.violations]
        if result.last_of_pass:
            break
    assert sorted(sliced) == whole


def test_kb_verify_refuses_options_it_cannot_honour(kb: KnowledgeBase) -> None:
    with pytest.raises(CommandError, match="--resume needs --slice-size"):
        call_command("kb_verify", "--resume")
    with pytest.raises(CommandError, match="take a number"):
        call_command("kb_verify", "--slice-size", "-3")
    call_command("kb_verify", "--status")  # nothing run yet: says so, exits 0


def test_disagreement_beyond_one_pass_is_read_by_the_next_pass(
    kb: KnowledgeBase, settings: Any
) -> None:
    settings.AUDIT_WINDOW_BUILDS = 2
    builds = built(kb, 6)
    audit.seal_pending(chunk_budget=10**9)
    first, second = builds[0], builds[5]
    for build in (first, second):
        Chunk.objects.filter(build=build, ordinal=0).delete()

    one = audit.shard_slice(builds=10**6, deep_windows=1)
    assert [c.build_id for c in one.damaged] == [first.pk] and len(one.disagreeing) == 2
    assert not one.wrapped  # the cursor stopped before the window it could not read
    two = audit.shard_slice(builds=10**6, deep_windows=1)
    assert [c.build_id for c in two.damaged] == [second.pk] and two.wrapped
