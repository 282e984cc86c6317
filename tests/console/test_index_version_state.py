"""Index versions as an index admin sees them (issue 13, items 2 and 9): their settings on every
page and in the audit entry, the side-by-side comparison before a swap, no swap offered (or
accepted) until the candidate covers the knowledge base, "ready" at n/n, a rollback that names
its target and never goes forward, and a retired version that says it is still built for
rollback. Real PostgreSQL, the pipeline run in-process, the admin through Django's test client
as a non-superuser index admin."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission
from django.db.models import Avg
from django.db.models.functions import Length
from django.test import Client
from django.utils import timezone

from kb.models import Build, Chunk, IndexVersion, KnowledgeBase, Publication
from kb.roles import INDEX_ADMINS, ensure_roles
from kb.selectors.index_versions import (
    index_version_comparison,
    index_version_progress,
    index_version_rollback_target,
    index_version_settings_line,
    index_version_status,
)
from kb.services.base import ActionRefused
from kb.services.index_versions import (
    index_version_activate,
    index_version_create,
    index_version_rollback,
)
from tests.console.admin_world import staff
from tests.helpers import run_pending, upload_text
from work.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)

TEXTS = {
    "travel": "# Travel\n\n" + "Train tickets are reimbursed in second class. " * 30,
    "leave": "# Leave\n\n" + "Paid leave is twenty-five days a year. " * 40,
}


@pytest.fixture
def ian(kb: KnowledgeBase) -> Client:
    ensure_roles(Group, Permission)
    client = Client()
    client.force_login(staff("ian", INDEX_ADMINS, kb.tenant))
    return client


@pytest.fixture
def built(kb: KnowledgeBase) -> KnowledgeBase:
    for key, text in TEXTS.items():
        upload_text(kb, key, text)
    run_pending()
    return kb


def new_version(kb: KnowledgeBase) -> IndexVersion:
    return index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-small",
        dimensions=128,
        chunk_size=400,
        chunk_overlap=50,
    )


def kb_page(client: Client, kb: KnowledgeBase) -> str:
    return client.get(f"/admin/kb/knowledgebase/{kb.pk}/change/").content.decode()


def version_row(page: str, number: int) -> str:
    match = re.search(rf'<tr id="version-{number}".*?</tr>', page, re.DOTALL)
    assert match is not None, f"no row for v{number}"
    return match.group(0)


def swap_url(kb: KnowledgeBase, version: IndexVersion) -> str:
    return f"/admin/kb/knowledgebase/{kb.pk}/index-versions/{version.pk}/activate/"


def rollback_url(kb: KnowledgeBase) -> str:
    return f"/admin/kb/knowledgebase/{kb.pk}/index-versions/rollback/"


def active_number(kb: KnowledgeBase) -> int:
    kb.refresh_from_db()
    assert kb.active_index_version is not None
    return kb.active_index_version.number


def test_no_swap_is_offered_or_accepted_until_the_candidate_covers_the_knowledge_base(
    built: KnowledgeBase, ian: Client
) -> None:
    kb = built
    v2 = new_version(kb)

    # given v2 with nothing built: its row shows the progress and offers a comparison only
    row = version_row(kb_page(ian, kb), 2)
    assert "building: 0/2 built" in row and "0/2" in row
    assert "activate-link" not in row and "Approve swap" not in row and "Compare…" in row

    # the page behind it compares and shows no form; a POST is refused and changes nothing
    page = ian.get(swap_url(kb, v2)).content.decode()
    assert 'id="swap-not-offered"' in page and 'name="reason"' not in page
    assert "travel: no live build yet" in page and 'id="version-comparison"' in page
    response = ian.post(swap_url(kb, v2), {"reason": "now", "expected": kb.active_index_version_id})
    assert response.status_code == 302 and active_number(kb) == 1
    assert "cannot be swapped in: building: 0/2 built" in kb_page(ian, kb)

    # when every document is built, v2 is ready and the swap is offered
    run_pending()
    row = version_row(kb_page(ian, kb), 2)
    assert "ready: 2/2 built" in row and "activate-link" in row and "Approve swap…" in row
    assert IndexVersion.objects.get(pk=v2.pk).state == IndexVersion.State.BUILDING  # computed


def test_a_new_upload_makes_a_ready_candidate_incomplete_again(
    built: KnowledgeBase, ian: Client
) -> None:
    kb = built
    v2 = new_version(kb)
    run_pending()
    upload_text(kb, "travel", TEXTS["travel"] + " Night trains too.")

    status = index_version_status(version=v2, progress=index_version_progress(version=v2), kb=kb)
    assert (status.kind, status.label, status.swappable) == (
        "building",
        "building: 1/2 built",
        False,
    )
    assert "activate-link" not in version_row(kb_page(ian, kb), 2)


def test_every_page_shows_the_settings_and_the_swap_page_compares_side_by_side(
    built: KnowledgeBase, ian: Client
) -> None:
    kb = built
    v2 = new_version(kb)
    run_pending()

    # the knowledge base's list
    row = version_row(kb_page(ian, kb), 2)
    for value in ("hash / canon-hash-small", "128d cosine", "400 / 50", "p2"):
        assert value in row, value
    assert "800 / 100" in version_row(kb_page(ian, kb), 1)

    # the index-version list and detail
    listing = ian.get("/admin/kb/indexversion/").content.decode()
    # the settings in one column (twelve did not fit 1,400 pixels), as on the page above
    assert "field-settings" in listing
    assert "hash/canon-hash-small · 128d cosine · chunks 400/50 · p2" in listing
    assert "ready: 2/2 built" in listing and "active: serving (2/2 built)" in listing
    detail = ian.get(f"/admin/kb/indexversion/{v2.pk}/change/").content.decode()
    assert "ready: 2/2 built" in detail and "canon-hash-small" in detail

    # the swap page: a two-column table, settings and figures, differences marked
    page = ian.get(swap_url(kb, v2)).content.decode()
    table = re.search(r'<table class="canon-compare".*?</table>', page, re.DOTALL)
    assert table is not None
    rows = {
        th: (left, right, "differs" in cls)
        for cls, th, left, right in re.findall(
            r'<tr class="([^"]*)"><th>([^<]*)</th><td>([^<]*)</td><td>([^<]*)</td></tr>',
            table.group(0),
        )
    }
    assert rows["chunk size"] == ("800", "400", True)
    assert rows["chunk overlap"] == ("100", "50", True)
    assert rows["model"][1] == "canon-hash-small" and rows["model"][2]
    assert rows["pipeline"] == ("p2", "p2", False)
    assert rows["documents covered"] == ("2 of 2", "2 of 2", False)
    assert rows["failed builds"] == ("0", "0", False)
    v1_chunks = Chunk.objects.filter(index_version=kb.active_index_version).count()
    v2_chunks = Chunk.objects.filter(index_version=v2).count()
    assert rows["chunks"] == (str(v1_chunks), str(v2_chunks), True) and v2_chunks > v1_chunks
    assert "Kept in the knowledge base's timeline" in page
    assert "Kept in the document" not in page


def test_the_comparison_counts_what_each_version_serves(built: KnowledgeBase) -> None:
    kb = built
    v1 = kb.active_index_version
    assert v1 is not None
    v2 = new_version(kb)
    run_pending()
    upload_text(kb, "leave", "Paid leave is thirty days a year.")  # queued in both
    failing = Build.objects.get(index_version=v2, revision__number=2)
    Build.objects.filter(pk=failing.pk).update(state=Build.State.FAILED, error="boom")

    comparison = index_version_comparison(active=v1, candidate=v2)

    active, candidate = comparison.active, comparison.candidate
    assert active is not None
    assert (active.documents, active.covered, active.missing) == (2, 1, 1)
    assert (candidate.failed, candidate.building, active.building) == (1, 0, 1)
    served = Chunk.objects.filter(
        index_version=v2,
        build_id__in=Publication.objects.filter(index_version=v2).values("build_id"),
    )
    assert candidate.chunks == served.count()
    expected = served.aggregate(chars=Avg(Length("text")), tokens=Avg("token_count"))
    assert candidate.avg_chars == pytest.approx(expected["chars"])
    assert candidate.avg_tokens == pytest.approx(expected["tokens"])


def test_swaps_and_rollbacks_audit_both_versions_settings(
    built: KnowledgeBase, ian: Client
) -> None:
    kb = built
    v1 = kb.active_index_version
    assert v1 is not None
    v2 = new_version(kb)
    run_pending()

    response = ian.post(swap_url(kb, v2), {"reason": "smaller chunks", "expected": v1.pk})
    assert response.status_code == 302 and active_number(kb) == 2
    swap = AuditEvent.objects.get(kind="index_version_swap")
    assert swap.details["reason"] == "smaller chunks" and swap.details["previous_id"] == v1.pk
    assert swap.details["from"]["chunk_size"] == 800 and swap.details["to"]["chunk_size"] == 400
    assert swap.details["to"]["model"] == "canon-hash-small"
    assert swap.details["from"]["pipeline_version"] == "p2"
    assert swap.action == (
        "active v2 (hash/canon-hash-small · 128d cosine · chunks 400/50 · p2); "
        f"was v1 ({index_version_settings_line(v1)})"
    )
    created = AuditEvent.objects.get(kind="index_version_created")
    assert created.details["settings"]["chunk_overlap"] == 50

    ian.post(rollback_url(kb), {"reason": "recall dropped", "expected": v2.pk})
    rollback = AuditEvent.objects.get(kind="index_version_rollback")
    assert active_number(kb) == 1
    assert (rollback.details["from"]["number"], rollback.details["to"]["number"]) == (2, 1)
    assert rollback.details["reason"] == "recall dropped"


def test_rollback_names_its_target_and_never_goes_forward(
    built: KnowledgeBase, ian: Client
) -> None:
    kb = built
    v1 = kb.active_index_version
    assert v1 is not None
    assert "version-rollback-link" not in kb_page(ian, kb)  # nothing retired yet
    v2 = new_version(kb)
    run_pending()
    index_version_activate(version_id=v2.pk, actor=None, expected_active_id=v1.pk)

    # after the swap: back to v1, named on the link and the page, with the comparison
    page = kb_page(ian, kb)
    assert "Roll back to the previous version (v1)…" in page
    confirm = ian.get(rollback_url(kb)).content.decode()
    assert "Roll acme/handbook back to index version 1" in confirm
    assert 'id="version-comparison"' in confirm and "roll back to v1" in confirm
    assert "Kept in the knowledge base's timeline" in confirm

    # and v1's row says it is still built for rollback, until when
    v1.refresh_from_db()
    assert v1.retired_at is not None
    until = timezone.localtime(v1.retired_at + timedelta(days=kb.retention_days))
    assert f"retired; still built for rollback until {until:%Y-%m-%d %H:%M}" in version_row(page, 1)
    upload_text(kb, "travel", TEXTS["travel"] + " Night trains too.")
    assert Build.objects.filter(index_version=v1, revision__number=2).exists()  # it is

    # after the rollback there is nothing older to go back to: no link, and the service refuses
    run_pending()
    ian.post(rollback_url(kb), {"reason": "recall dropped", "expected": v2.pk})
    assert active_number(kb) == 1
    page = kb_page(ian, kb)
    assert "version-rollback-link" not in page
    with pytest.raises(ActionRefused, match="no earlier retained index version"):
        index_version_rollback(kb_id=kb.pk, actor=None)
    response = ian.post(rollback_url(kb), {"reason": "again", "expected": v1.pk})
    assert response.status_code == 302 and active_number(kb) == 1
    # v2 (newer, retired by the rollback) may be swapped in again: that is going forward
    row = version_row(page, 2)
    assert "retired; still built for rollback until" in row and "Swap v2 in again…" in row


def test_a_version_past_retention_is_not_offered(built: KnowledgeBase, ian: Client) -> None:
    kb = built
    v1 = kb.active_index_version
    assert v1 is not None
    v2 = new_version(kb)
    run_pending()
    index_version_activate(version_id=v2.pk, actor=None, expected_active_id=v1.pk)
    long_ago = timezone.now() - timedelta(days=kb.retention_days + 1)
    IndexVersion.objects.filter(pk=v1.pk).update(retired_at=long_ago)

    page = kb_page(ian, kb)
    assert "version-rollback-link" not in page
    assert "retired; past retention" in version_row(page, 1)
    assert index_version_rollback_target(kb=kb) is None
