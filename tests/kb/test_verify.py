"""`kb_verify`'s reports (`kb.verify`): planted violations are named by their check and their
row: a live build missing a chunk, a queued task with no way to run, a keyword index out of
step with the chunks, an active pointer at a retired version."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from ingestion.pipeline.run import task_execute
from kb.models import Build, Chunk, KnowledgeBase, Posting
from tests.helpers import upload_task
from work.models import OutboxEvent

pytestmark = pytest.mark.django_db(transaction=True)


def test_kb_verify_reports_planted_violations(kb: KnowledgeBase) -> None:
    task = upload_task(kb, "doc", "Some text. " * 200)
    task_execute(task_id=task.pk, worker_id="w")
    call_command("kb_verify")
    build = Build.objects.get()

    # a live build loses a chunk, and a queued task loses its way to run
    Chunk.objects.filter(build=build, ordinal=0).delete()
    stuck = upload_task(kb, "other", "More text.")
    OutboxEvent.objects.filter(task=stuck).update(dead_at=timezone.now())

    with pytest.raises(CommandError) as failure:
        call_command("kb_verify")
    report = str(failure.value)
    assert f"[live-build-complete] build {build.pk}" in report
    assert f"[task-can-run] task {stuck.pk}" in report
    # the lost chunk left the build's BM25 statistics counting one chunk too many
    assert f"[keyword-index] build {build.pk}: statistics count" in report


def test_kb_verify_reports_a_live_chunk_missing_from_the_keyword_index(kb: KnowledgeBase) -> None:
    task = upload_task(kb, "doc", "Some text about vacuum and indexes.")
    task_execute(task_id=task.pk, worker_id="w")
    build = Build.objects.get()
    Posting.objects.filter(chunk__build=build).delete()

    with pytest.raises(CommandError, match=rf"\[keyword-index\] build {build.pk}: 1 chunks have"):
        call_command("kb_verify")


def test_kb_verify_reports_an_active_pointer_at_a_retired_version(kb: KnowledgeBase) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE kb_indexversion SET state = 'retired' WHERE kb_id = %s", [kb.pk])
    with pytest.raises(CommandError, match="active-index-version"):
        call_command("kb_verify")
