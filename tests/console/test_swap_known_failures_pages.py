"""Issue 26, item 1, as an index admin and a content manager see it through the admin: a
candidate whose only failure is one the active version shares is "ready" and offers the swap,
whose page names that failure and links its document; a candidate that would serve a document
worse is "incomplete" with its way out, its page names the document and what to do, and a POST
is refused; the home's bar never says "building" for a candidate nothing is built for."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client

from kb.models import Build, IndexVersion, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from tests.console.admin_world import staff
from tests.helpers import run_pending
from tests.kb.publishing import publish
from tests.kb.test_swap_with_known_failures import fail_build, new_version, upload_broken

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clients(kb: KnowledgeBase) -> tuple[Client, Client]:
    ensure_roles(Group, Permission)
    ian, carol = Client(), Client()
    ian.force_login(staff("ian", INDEX_ADMINS, kb.tenant))
    carol.force_login(staff("carol", CONTENT_MANAGERS, kb.tenant))
    return ian, carol


@pytest.fixture
def served(kb: KnowledgeBase) -> KnowledgeBase:
    publish(kb, "travel", "Train tickets are reimbursed in second class.")
    publish(kb, "leave", "Paid leave is twenty-five days a year.")
    return kb


def version_row(page: str, number: int) -> str:
    match = re.search(rf'<tr id="version-{number}".*?</tr>', page, re.DOTALL)
    assert match is not None, f"no row for v{number}"
    return match.group(0)


def bar(page: str, number: int) -> str:
    """The home's bar of v`number`, up to the next bar or the idle line, spaces collapsed."""
    opening = f'<div class="canon-bar" data-version="{number}">'
    start = page.index(opening) + len(opening)
    end = min(i for i in (page.find('class="canon-bar"', start), page.find("idle", start)) if i > 0)
    return re.sub(r"\s+", " ", page[start:end])


def test_a_shared_failure_is_named_on_the_swap_page_and_the_swap_goes_ahead(
    served: KnowledgeBase, clients: tuple[Client, Client]
) -> None:
    kb = served
    ian, carol = clients
    scan = upload_broken(kb, "scan")
    run_pending()
    v2 = new_version(kb)

    # while v2 builds, the home's bar says so; the idle line is hidden
    home = carol.get(f"/admin/kb/knowledgebase/{kb.pk}/home/").content.decode()
    assert "Re-index into v2 (building)" in bar(home, 2)
    run_pending()

    # once nothing runs, the bar says ready to swap, never building, and names the failure
    home = carol.get(f"/admin/kb/knowledgebase/{kb.pk}/home/").content.decode()
    line = bar(home, 2)
    assert "Re-index into v2 (ready to swap)" in line and "(building)" not in line
    assert "ready: 2/3 built; 1 failed as in v1" in line and "#index-versions" in line
    progress = carol.get(f"/admin/kb/knowledgebase/{kb.pk}/home/progress/").json()
    (candidate,) = [v for v in progress["versions"] if v["version"] == 2]
    assert (candidate["doing"], candidate["in_progress"]) == ("ready to swap", False)

    # the settings page offers the swap
    settings = ian.get(f"/admin/kb/knowledgebase/{kb.pk}/change/").content.decode()
    row = version_row(settings, 2)
    assert "ready: 2/3 built; 1 failed as in v1" in row and "Approve swap…" in row

    # the swap page names the failure, links its document, and says it changes nothing
    url = f"/admin/kb/knowledgebase/{kb.pk}/index-versions/{v2.pk}/activate/"
    page = ian.get(url).content.decode()
    assert "Served as before: failed in both versions (1)" in page
    assert f'href="/admin/kb/document/{scan.document_id}/change/"' in page
    assert "r1 failed in v2; v1 does not serve it either" in page
    assert "damaged or truncated" in page and 'name="reason"' in page
    assert "What keeps the swap back" not in page
    response = ian.post(url, {"reason": "smaller chunks", "expected": kb.active_index_version_id})
    assert response.status_code == 302
    kb.refresh_from_db()
    assert kb.active_index_version_id == v2.pk


def test_a_candidate_that_would_serve_worse_names_each_document_and_its_way_out(
    served: KnowledgeBase, clients: tuple[Client, Client]
) -> None:
    kb = served
    ian, carol = clients
    v2 = new_version(kb)
    leave = Build.objects.get(index_version=v2, document__key="leave")
    fail_build(leave, "the provider refused the input")
    run_pending()

    # the row says it is stuck and what to do, and offers the comparison with what to do
    settings = ian.get(f"/admin/kb/knowledgebase/{kb.pk}/change/").content.decode()
    row = version_row(settings, 2)
    assert "incomplete: 1/2 built; 1 failed that v1 serves: retry, fix or delete it" in row
    assert "Approve swap" not in row and "Compare and see what to do…" in row

    # the compare page lists the document, linked, with the reason and the way out
    url = f"/admin/kb/knowledgebase/{kb.pk}/index-versions/{v2.pk}/activate/"
    page = ian.get(url).content.decode()
    assert 'id="swap-not-offered"' in page and 'name="reason"' not in page
    assert "What keeps the swap back (1)" in page
    assert f'href="/admin/kb/document/{leave.document_id}/change/"' in page
    assert "r1 failed in v2, but v1 serves r1: the swap would stop serving it" in page
    assert "the provider refused the input" in page
    assert "Retry its build if the failure was temporary" in page
    response = ian.post(url, {"reason": "now", "expected": kb.active_index_version_id})
    assert response.status_code == 302
    kb.refresh_from_db()
    assert kb.active_index_version is not None and kb.active_index_version.number == 1

    # the home's bar says stuck, with the way out, not building
    line = bar(carol.get(f"/admin/kb/knowledgebase/{kb.pk}/home/").content.decode(), 2)
    assert "Re-index into v2 (stuck)" in line and "(building)" not in line
    assert "retry, fix or delete it" in line and "Index versions →" in line
    assert IndexVersion.objects.get(pk=v2.pk).state == IndexVersion.State.BUILDING  # stored
