"""Issue 37, item 7, for sources: the reason typed when confirming (or keeping) the deletions a
run held shows on the run's page, in the timeline and in each document's History box, not only
behind HISTORY; a paused source shows no "next sync" time; "Where the time went" accounts for the
run's whole time (waiting for a worker, its own measured parts, the rest, waiting for a person)
so a 7-second run never reads 0.00 s / 0.00 s / 0.00 s."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from kb.models import KnowledgeBase, Tenant
from sources.models import Source, SyncRun
from sources.selectors import run_time_split
from sources.services.sources import source_pause
from tests.sources.people import awaiting_run, content_manager, index_admin, synced_document
from work.models import IngestionTask

pytestmark = pytest.mark.django_db


def words(text: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html.unescape(text)).split())


def element(page: Any, element_id: str, end: str) -> str:
    """The words from the element with `element_id` to the first `end` after it."""
    text = page.content.decode()
    start = text.index(f'id="{element_id}"')
    return words(text[text.index(">", start) + 1 : text.index(end, start)])


def run_url(run: SyncRun) -> str:
    return f"/admin/sources/syncrun/{run.pk}/change/"


# --- reasons -------------------------------------------------------------------------------


def test_the_reason_for_confirmed_deletions_shows_on_the_run_the_timeline_and_each_history(
    tenant: Tenant, kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    gone = [synced_document(source, name, f"Text of {name}.") for name in ("a.md", "b.md")]
    kept = synced_document(source, "c.md", "Still there.")
    run = awaiting_run(source, ["a.md", "b.md"])
    ian = index_admin(tenant)

    response = ian.post(
        f"/admin/sources/syncrun/{run.pk}/confirm-deletions/",
        {"reason": "the old folder was archived on purpose"},
    )

    assert response.status_code == 302
    answered = element(ian.get(run_url(run)), "answered", "</div>")
    assert "Confirmed by ian" in answered and "2 documents deleted" in answered
    assert "Why: the old folder was archived on purpose" in answered

    timeline = words(ian.get(f"/admin/kb/knowledgebase/{kb.pk}/timeline/").content.decode())
    assert "confirmed a sync's deletions" in timeline
    assert "the old folder was archived on purpose" in timeline
    assert f"sync run {run.pk} of Share: 2 documents deleted" in timeline

    for document in gone:
        history = element(
            ian.get(f"/admin/kb/document/{document.pk}/change/"), "history", "</table>"
        )
        assert "deletion confirmed" in history and "ian" in history
        assert "the old folder was archived on purpose" in history
        assert "deleted by sync of Share: gone at the source" in history  # the delete itself
    untouched = element(ian.get(f"/admin/kb/document/{kept.pk}/change/"), "history", "</table>")
    assert "archived on purpose" not in untouched


def test_the_reason_for_keeping_the_documents_shows_too(
    tenant: Tenant, kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    document = synced_document(source, "a.md", "A.")
    synced_document(source, "b.md", "B.")
    run = awaiting_run(source, ["a.md"])
    ian = index_admin(tenant)

    ian.post(
        f"/admin/sources/syncrun/{run.pk}/keep-documents/",
        {"reason": "the share was offline for maintenance"},
    )

    answered = element(ian.get(run_url(run)), "answered", "</div>")
    assert "Kept by ian" in answered and "1 document kept, served as it is" in answered
    assert "Why: the share was offline for maintenance" in answered
    timeline = words(ian.get(f"/admin/kb/knowledgebase/{kb.pk}/timeline/").content.decode())
    assert "kept what a sync would delete" in timeline
    assert "the share was offline for maintenance" in timeline
    history = element(ian.get(f"/admin/kb/document/{document.pk}/change/"), "history", "</table>")
    assert "kept (not deleted)" in history and "offline for maintenance" in history


def test_a_timeline_reader_outside_the_documents_groups_sees_the_answer_but_no_document(
    tenant: Tenant, kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    synced_document(source, "pay.md", "Salaries.", groups=("hr",))
    synced_document(source, "other.md", "Other.")
    run = awaiting_run(source, ["pay.md"])
    index_admin(tenant).post(
        f"/admin/sources/syncrun/{run.pk}/confirm-deletions/", {"reason": "payroll moved"}
    )

    carol = content_manager(tenant)  # not in hr
    timeline = words(carol.get(f"/admin/kb/knowledgebase/{kb.pk}/timeline/").content.decode())

    assert "confirmed a sync's deletions" in timeline and "payroll moved" in timeline
    assert "pay.md" not in timeline.replace("a document you cannot read", "")


# --- next sync of a paused source ---------------------------------------------------------------


def test_a_paused_source_shows_no_next_sync_time(
    tenant: Tenant, folder_source: Callable[..., Source]
) -> None:
    source = folder_source(sync_every_minutes=30)
    soon = timezone.now() + timedelta(minutes=12)
    Source.objects.filter(pk=source.pk).update(next_sync_at=soon)
    source.refresh_from_db()
    ian = index_admin(tenant)
    url = f"/admin/sources/source/{source.pk}/change/"
    assert soon.strftime("%Y-%m-%d %H:%M") in words(ian.get(url).content.decode())

    source_pause(source=source, paused=True)

    page = words(ian.get(url).content.decode())
    assert "Next sync: none while paused: no run starts until it is resumed" in page
    assert soon.strftime("%Y-%m-%d %H:%M") not in page
    viewer = words(content_manager(tenant).get(url).content.decode())  # the read-only page
    assert "none while paused" in viewer and soon.strftime("%Y-%m-%d %H:%M") not in viewer


# --- where the time went ----------------------------------------------------------------------


def _run_at(source: Source, **fields: Any) -> SyncRun:
    run = SyncRun.objects.create(source=source)
    SyncRun.objects.filter(pk=run.pk).update(**fields)
    run.refresh_from_db()
    return run


def test_the_time_split_adds_up_to_the_whole_run(
    tenant: Tenant, folder_source: Callable[..., Source]
) -> None:
    # a run asked for at t0 that waited 5.5 s behind builds, then listed and found nothing new
    # (nothing fetched or submitted) and ended 7 s after it was asked for
    t0 = timezone.now() - timedelta(minutes=5)
    run = _run_at(
        folder_source(),
        state=SyncRun.State.SUCCEEDED,
        created_at=t0,
        started_at=t0 + timedelta(seconds=5.5),
        finished_at=t0 + timedelta(seconds=7),
        seconds_listing=0.004,
    )

    parts, total = run_time_split(run)

    assert total == pytest.approx(7.0)
    assert {p.key: round(p.seconds, 3) for p in parts} == {
        "waiting": 5.5,
        "listing": 0.004,
        "fetching": 0.0,
        "submitting": 0.0,
        "other": 1.496,
    }
    page = index_admin(tenant).get(run_url(run)).content.decode()
    for key, shown in (("waiting", "5.50"), ("listing", "0.00"), ("other", "1.50")):
        assert f'data-time="{key}">{shown} s<' in page, key
    assert 'data-time="total"><strong>7.00 s</strong>' in page
    cells = element(index_admin(tenant, name="ivy").get(run_url(run)), "run-times", "</fieldset>")
    assert "waiting for a worker" in cells and "the rest of the run" in cells and "in all" in cells


def test_held_deletions_count_the_wait_for_a_person_apart(
    tenant: Tenant, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    synced_document(source, "a.md", "A.")
    run = awaiting_run(source, ["a.md"])
    t0 = timezone.now() - timedelta(hours=3)
    SyncRun.objects.filter(pk=run.pk).update(
        created_at=t0,
        started_at=t0 + timedelta(seconds=1),
        seconds_listing=0.5,
        seconds_submitting=1.5,
        finished_at=None,
    )
    IngestionTask.objects.filter(sync_run=run).update(finished_at=t0 + timedelta(seconds=4))
    run.refresh_from_db()

    parts, total = run_time_split(run)

    shown = {p.key: p.seconds for p in parts}
    assert shown["waiting"] == pytest.approx(1.0)
    assert shown["other"] == pytest.approx(1.0)  # 3 s of work, 2 s measured
    assert shown["answer"] == pytest.approx(3 * 3600 - 4, abs=5)
    assert total == pytest.approx(sum(shown.values()))
    cells = element(index_admin(tenant).get(run_url(run)), "run-times", "</fieldset>")
    assert "waiting for a person" in cells and "so far" in cells


def test_a_run_not_yet_started_says_so(
    tenant: Tenant, folder_source: Callable[..., Source]
) -> None:
    run = _run_at(folder_source(), state=SyncRun.State.QUEUED)
    assert run_time_split(run) == ([], None)
    cells = element(index_admin(tenant).get(run_url(run)), "run-times", "</fieldset>")
    assert "Not started yet: waiting for a worker." in cells
