"""Issue 26, items 5 and 6: a failure of a revision that a newer live revision replaced is history,
not a current problem — no failure counted on the settings page, the swap page, the rollback page
or the dashboard, and no Retry… on it; the document page's live refresh brings its Builds and
History boxes (a new Retry…, a new publish) as a reload would, and a build that failed before it
was chunked says so instead of "?"."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from kb.models import Build, Document, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.base import ActionRefused
from kb.services.documents import build_retry
from kb.services.index_versions import index_version_activate
from tests.console.admin_world import staff
from tests.helpers import run_pending, upload_text
from tests.kb.publishing import publish
from tests.kb.test_swap_with_known_failures import new_version, upload_broken

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clients(kb: KnowledgeBase) -> tuple[Client, Client]:
    ensure_roles(Group, Permission)
    ian, carol = Client(), Client()
    ian.force_login(staff("ian", INDEX_ADMINS, kb.tenant))
    carol.force_login(staff("carol", CONTENT_MANAGERS, kb.tenant))
    return ian, carol


@pytest.fixture
def fixed(kb: KnowledgeBase) -> Document:
    """`scan` r1 failed (a truncated PDF); r2, readable, is live."""
    publish(kb, "travel", "Train tickets are reimbursed in second class.")
    upload_broken(kb, "scan")
    run_pending()
    upload_text(kb, "scan", "The scanned form, typed out: travel is booked through the desk.")
    run_pending()
    return Document.objects.get(kb=kb, key="scan")


def row_of(page: str, element_id: str) -> str:
    match = re.search(rf'<tr id="{element_id}".*?</tr>', page, re.DOTALL)
    assert match is not None, f"no row {element_id}"
    return re.sub(r"\s+", " ", match.group(0))


def figure(page: str, label: str) -> list[str]:
    match = re.search(rf"<th>{label}</th>((?:<td>[^<]*</td>)+)", page)
    assert match is not None, f"no figure {label}"
    return re.findall(r"<td>([^<]*)</td>", match.group(1))


def test_a_replaced_failure_is_history_on_every_page(
    kb: KnowledgeBase, fixed: Document, clients: tuple[Client, Client], admin_user: User
) -> None:
    ian, carol = clients
    old = Build.objects.get(document=fixed, revision__number=1)
    assert old.state == Build.State.FAILED

    # the document page: the old build is history, without Retry…; the live one is served
    page = carol.get(f"/admin/kb/document/{fixed.pk}/change/").content.decode()
    row = row_of(page, f"build-{old.pk}")
    assert "failed earlier; r2 is the current revision" in row
    assert "canon-role-failed_earlier" in row and "retry-link" not in row
    status = re.search(r'field-status.*?class="readonly">(.*?)</div>', page, re.DOTALL)
    assert status is not None and status.group(1).strip() == "live r2"
    with pytest.raises(ActionRefused, match="no longer the current one"):
        build_retry(build_id=old.pk)

    # the settings page: v1 names no failure
    settings = ian.get(f"/admin/kb/knowledgebase/{kb.pk}/change/").content.decode()
    v1 = row_of(settings, "version-1")
    assert "failed" not in v1 and "active: serving (2/2 built)" in v1

    # the swap page: no failed builds in either version
    v2 = new_version(kb)
    run_pending()
    swap = ian.get(f"/admin/kb/knowledgebase/{kb.pk}/index-versions/{v2.pk}/activate/")
    assert figure(swap.content.decode(), "failed builds") == ["0", "0"]

    # the rollback page, once v2 is active: v1 ready to go back to, nothing failed, nothing red
    index_version_activate(
        version_id=v2.pk, actor=None, expected_active_id=kb.active_index_version_id
    )
    rollback = ian.get(f"/admin/kb/knowledgebase/{kb.pk}/index-versions/rollback/")
    text = rollback.content.decode()
    assert "failed" not in re.sub(r"\s+", " ", text.split('id="version-status"')[1][:300])
    assert "Not ready" not in text and "What keeps the swap back" not in text
    assert figure(text, "failed builds") == ["0", "0"]

    # the dashboard: not among failed tasks, counted apart as history
    board = Client()
    board.force_login(admin_user)
    dashboard = board.get("/admin/ingestion/ingestiontask/dashboard/").content.decode()
    dead = dashboard.split('id="dead"')[1].split('id="anomalies"')[0]
    assert "None." in dead
    assert '<td class="count-failed-earlier">1</td>' in dashboard
    assert "count-failed" not in dashboard.replace("count-failed-earlier", "")


def test_a_failure_of_the_current_revision_is_still_a_problem(
    kb: KnowledgeBase, clients: tuple[Client, Client]
) -> None:
    ian, carol = clients
    publish(kb, "travel", "Train tickets are reimbursed in second class.")
    scan = upload_broken(kb, "scan")
    run_pending()
    build = Build.objects.get(revision=scan)
    page = carol.get(f"/admin/kb/document/{scan.document_id}/change/").content.decode()
    row = row_of(page, f"build-{build.pk}")
    assert "canon-role-failed" in row and "retry-link" in row
    # never "?": it failed before it was chunked, and the page says so
    assert "— (failed before chunking)" in row and ">?<" not in row
    settings = ian.get(f"/admin/kb/knowledgebase/{kb.pk}/change/").content.decode()
    assert "scan r1:" in row_of(settings, "version-1")


def test_the_live_refresh_brings_history_and_retry(
    kb: KnowledgeBase, clients: tuple[Client, Client]
) -> None:
    """What the page's script puts in the Builds and History boxes is what a reload shows."""
    _, carol = clients
    revision = upload_text(kb, "travel", "Train tickets are reimbursed in second class.")
    url = f"/admin/kb/document/{revision.document_id}/progress/"
    before = carol.get(url).json()
    assert "Nothing published yet" in before["history_html"]
    assert "queued" in before["builds_html"]

    run_pending()
    after = carol.get(url).json()
    assert after["status"].startswith("live r1")
    history = after["history_html"]
    assert "publish" in history and "Nothing published yet" not in history
    assert "Canon, when built" in after["history_html"] and "UTC" in after["history_html"]
    assert "served now" in after["builds_html"]

    broken = upload_broken(kb, "travel")
    run_pending()
    failed = carol.get(url).json()
    build = Build.objects.get(revision=broken)
    assert f"/retry/{build.pk}/" in failed["builds_html"]
    (row,) = [b for b in failed["builds"] if b["id"] == build.pk]
    assert row["label"] == "— (failed before chunking)" and row["chunks"] == row["label"]


def test_a_failure_committing_while_the_progress_is_read_shows_in_figures_and_rows_alike(
    kb: KnowledgeBase, clients: tuple[Client, Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's script sets each role from the JSON's figures and the actions cell from its
    rendered rows: they must be one reading, or a failure committing in between shows a row
    whose role says "queued" beside its Retry… (seen in a browser test)."""
    from console.admin import document_actions
    from kb.selectors import documents

    _, carol = clients
    publish(kb, "travel", "Train tickets are reimbursed in second class.")
    broken = upload_broken(kb, "travel")
    read = documents.document_build_rows

    def read_then_fail(**kwargs: object) -> object:
        rows = read(**kwargs)  # type: ignore[arg-type]
        if not Build.objects.filter(revision=broken, state=Build.State.FAILED).exists():
            run_pending()  # the worker fails the build just after this reading
        return rows

    monkeypatch.setattr(documents, "document_build_rows", read_then_fail)
    monkeypatch.setattr(document_actions, "document_build_rows", read_then_fail)
    data = carol.get(f"/admin/kb/document/{broken.document_id}/progress/").json()
    build = Build.objects.get(revision=broken)
    assert build.state == Build.State.FAILED  # it did fail during the request
    (row,) = [b for b in data["builds"] if b["id"] == build.pk]
    offers_retry = f"/retry/{build.pk}/" in data["builds_html"]
    assert (row["role_kind"] == "failed") == offers_retry, (row["role"], offers_retry)
