"""The approval page's diff (issue 13, item 5): chunks matched by content hash and position,
changed ones with word-level highlighting, unchanged runs collapsed, bounded for large documents;
revisions named by number and date, the title as written."""

from __future__ import annotations

import pytest
from django.test import Client

from kb.diff import chunk_diff, word_diff
from kb.models import Build, Document, KnowledgeBase
from tests.console.admin_world import staff
from tests.retrieval.factories import build, publish, upload

pytestmark = pytest.mark.django_db


def _paragraph(topic: str, detail: str = "") -> str:
    """About one chunk's worth of text (the chunk size is 800 characters)."""
    words = " ".join(f"{topic}{i}" for i in range(90))
    return f"{topic.title()} rules. {detail}{words}."


def _document_text(paragraphs: list[str]) -> str:
    return "# Handbook\n\n" + "\n\n".join(paragraphs) + "\n"


@pytest.fixture
def two_revisions(kb: KnowledgeBase) -> tuple[Document, Build, Build]:
    """r1 live; r2 (one paragraph edited, one removed, one added) waiting for approval."""
    publish(
        kb,
        "handbook",
        _document_text(
            [
                _paragraph("travel", "Trains are reimbursed in second class. "),
                _paragraph("meals"),
                _paragraph("hotels"),
                _paragraph("taxis"),
            ]
        ),
    )
    KnowledgeBase.objects.filter(pk=kb.pk).update(require_approval=True)
    candidate = build(
        upload(
            kb,
            "handbook",
            _document_text(
                [
                    _paragraph("travel", "Trains are reimbursed in first class. "),
                    _paragraph("meals"),
                    _paragraph("taxis"),
                    _paragraph("parking"),
                ]
            ),
        )
    )
    document = Document.objects.get(key="handbook")
    Document.objects.filter(pk=document.pk).update(title="Travel Policy")
    live = Build.objects.get(document=document, state=Build.State.LIVE)
    assert candidate.state == Build.State.READY
    return document, live, candidate


def test_word_diff_marks_only_the_changed_words() -> None:
    segments, truncated = word_diff(
        "Trains in second class.\nKeep receipts.", "Trains in first class.\nKeep receipts."
    )
    assert not truncated
    assert ("delete", "second") in segments and ("insert", "first") in segments
    assert (
        "".join(t for op, t in segments if op != "insert")
        == "Trains in second class.\nKeep receipts."
    )
    assert (
        "".join(t for op, t in segments if op != "delete")
        == "Trains in first class.\nKeep receipts."
    )


def test_chunks_are_matched_by_content_hash_and_changed_ones_are_word_diffed(
    two_revisions: tuple[Document, Build, Build],
) -> None:
    _, live, candidate = two_revisions
    diff = chunk_diff(candidate=candidate, live=live)
    assert diff.unchanged >= 1  # "meals" (and "taxis") kept their chunks
    changed = [row for row in diff.rows if row.kind == "changed"]
    inserted = {t for row in changed for op, t in row.segments if op == "insert"}
    deleted = {t for row in changed for op, t in row.segments if op == "delete"}
    assert any("first" in t for t in inserted) and any("second" in t for t in deleted)
    shown_new = " ".join(row.text for row in diff.rows if row.kind == "added")
    shown_old = " ".join(row.text for row in diff.rows if row.kind == "removed")
    everything = shown_new + shown_old + " ".join(t for row in changed for _, t in row.segments)
    assert "parking1 " in everything and "hotels1 " in everything
    assert all(row.count >= 1 for row in diff.rows if row.kind == "unchanged")
    total_new = diff.changed + diff.added + diff.unchanged
    assert total_new == candidate.expected_chunk_count
    assert diff.changed + diff.removed + diff.unchanged == live.expected_chunk_count


def test_nothing_served_shows_every_chunk_as_added(kb: KnowledgeBase) -> None:
    KnowledgeBase.objects.filter(pk=kb.pk).update(require_approval=True)
    candidate = build(
        upload(kb, "fresh", _document_text([_paragraph("alpha"), _paragraph("beta")]))
    )
    diff = chunk_diff(candidate=candidate, live=None)
    assert diff.added == candidate.expected_chunk_count and not diff.removed and not diff.changed
    assert [row.kind for row in diff.rows] == ["added"] * diff.added


def test_a_large_change_renders_a_bounded_number_of_chunks_and_says_how_many_more(
    kb: KnowledgeBase,
) -> None:
    publish(kb, "big", _document_text([_paragraph(f"old{i}x") for i in range(12)]))
    KnowledgeBase.objects.filter(pk=kb.pk).update(require_approval=True)
    candidate = build(
        upload(kb, "big", _document_text([_paragraph(f"new{i}x") for i in range(12)]))
    )
    live = Build.objects.get(document__key="big", state=Build.State.LIVE)
    diff = chunk_diff(candidate=candidate, live=live, max_rows=5)
    assert len([row for row in diff.rows if row.kind != "unchanged"]) == 5
    assert diff.rows_not_shown == diff.changed + diff.added + diff.removed - 5 > 0


def test_the_approval_page_shows_revisions_by_number_and_date_and_the_title_as_written(
    two_revisions: tuple[Document, Build, Build], tenant: object
) -> None:
    document, live, candidate = two_revisions
    from django.contrib.auth.models import Group, Permission

    from kb.roles import INDEX_ADMINS, ensure_roles

    ensure_roles(Group, Permission)
    client = Client()
    client.force_login(staff("ian", INDEX_ADMINS, document.kb.tenant))
    page = client.get(f"/admin/kb/document/{document.pk}/approve/{candidate.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Yes, approve revision 2 of Travel Policy" in html
    assert f"build {candidate.pk}" not in html and f"build {live.pk}" not in html
    served = page.context["summary"]["live_text"]
    assert served.startswith("revision 1 · uploaded ") and " UTC" in served
    assert "<del>second</del>" in html and "<ins>first</ins>" in html
    assert "unchanged chunk" in html
