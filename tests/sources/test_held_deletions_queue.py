"""Issue 37, item 6: deletions a sync run holds for a person's confirmation are a work queue like
*Awaiting approval*: a tile with their count on the knowledge base's home and on the admin's
front page (for one knowledge base its summary, for several a column of the list), linking to
the runs that hold them; and on the consistency dashboard once they have waited over a day.
Counts name no document; another tenant's runs never count."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from kb.models import KnowledgeBase, Tenant, TenantMembership
from kb.services.index_versions import knowledge_base_create
from sources.models import Source, SyncRun
from sources.services.sources import source_save
from tests.sources.people import (
    awaiting_run,
    client_of,
    content_manager,
    index_admin,
    synced_document,
)
from work.models import IngestionTask

pytestmark = pytest.mark.django_db


def words(response: Any) -> str:
    assert response.status_code == 200, response.status_code
    return " ".join(re.sub(r"<[^>]+>", " ", html.unescape(response.content.decode())).split())


def tile(response: Any) -> str:
    """The words of the held-deletions tile ('' when the page has none)."""
    text = response.content.decode()
    if 'id="held-deletions"' not in text:
        return ""
    start = text.index(">", text.index('id="held-deletions"')) + 1
    return " ".join(re.sub(r"<[^>]+>", " ", text[start : text.index("</li>", start)]).split())


def held(source: Source, paths: list[str], *, waiting: timedelta | None = None) -> SyncRun:
    """A run of `source` holding the deletion of `paths` (documents made first), its work
    ended `waiting` ago (default: just now)."""
    for path in paths:
        synced_document(source, path, f"Text of {path}.")
    run = awaiting_run(source, paths)
    if waiting is not None:
        ended = timezone.now() - waiting
        SyncRun.objects.filter(pk=run.pk).update(created_at=ended, started_at=ended)
        IngestionTask.objects.filter(sync_run=run).update(finished_at=ended)
    return run


def test_the_home_has_a_tile_counting_held_deletions_linked_to_their_runs(
    tenant: Tenant, kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    synced_document(source, "stays.md", "Stays.")
    run = held(source, ["a.md", "b.md"])
    ian = index_admin(tenant)
    home = ian.get(f"/admin/kb/knowledgebase/{kb.pk}/home/")

    assert tile(home).startswith("2 deletions to confirm"), tile(home)
    link = re.search(r'id="held-deletions"[^>]*><a href="([^"]+)"', home.content.decode())
    assert link is not None
    url = html.unescape(link.group(1))
    assert "state__exact=awaiting_confirmation" in url and f"source__kb__id__exact={kb.pk}" in url
    listed = ian.get(url)
    assert listed.status_code == 200
    assert [r.pk for r in listed.context["cl"].result_list] == [run.pk]
    # content managers see the queue too (an index admin answers it)
    assert tile(content_manager(tenant).get(f"/admin/kb/knowledgebase/{kb.pk}/home/")).startswith(
        "2 deletions to confirm"
    )

    # answered, the count goes back to zero and the tile stays quiet
    ian.post(f"/admin/sources/syncrun/{run.pk}/keep-documents/", {"reason": "outage"})
    home = ian.get(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    assert tile(home).startswith("0 deletions to confirm")
    assert 'id="held-deletions" class=""' in home.content.decode()


def test_no_tile_without_sources_or_for_a_user_who_may_not_see_them(
    tenant: Tenant, kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    other = knowledge_base_create(tenant=tenant, name="Plain", slug="plain")
    ian = index_admin(tenant)
    assert tile(ian.get(f"/admin/kb/knowledgebase/{other.pk}/home/")) == ""

    held(folder_source(), ["a.md"])
    viewer = User.objects.create_user("vic", password="a-long-test-password", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_knowledgebase"))
    TenantMembership.objects.create(user=viewer, tenant=tenant)
    page = client_of(viewer).get(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    assert page.status_code == 200 and tile(page) == ""


def test_the_front_page_shows_the_tile_for_one_knowledge_base_and_a_column_for_several(
    tenant: Tenant, kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    first = folder_source()
    held(first, ["a.md", "b.md", "c.md"])
    ian = index_admin(tenant)

    assert tile(ian.get("/admin/")).startswith("3 deletions to confirm")

    second = knowledge_base_create(tenant=tenant, name="Wiki", slug="wiki")
    elsewhere = source_save(
        kb=second, name="Wiki share", slug="wiki", kind="folder", config=dict(first.config)
    )
    theirs = held(elsewhere, ["x.md"])
    front = ian.get("/admin/")
    text = front.content.decode()
    assert 'id="kb-landing-list"' in text and "deletions to confirm" in words(front)
    for knowledge_base, count in ((kb, 3), (second, 1)):
        row = text[text.index(f'data-kb="{knowledge_base.pk}"') :]
        row = row[: row.index("</tr>")]
        cell = re.search(r'data-queue="held_deletions"><a href="([^"]+)"[^>]*>(\d+)<', row)
        assert cell is not None, row
        assert int(cell.group(2)) == count
        url = html.unescape(cell.group(1))
        assert f"source__kb__id__exact={knowledge_base.pk}" in url
        assert 'data-queue="awaiting_approval"' in row and 'data-queue="failed"' in row
        runs = {r.pk for r in ian.get(url).context["cl"].result_list}
        assert (theirs.pk in runs) == (knowledge_base == second) and len(runs) == 1


def test_the_dashboard_lists_held_deletions_waiting_over_a_day_of_the_users_tenant_only(
    tenant: Tenant, kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    old = held(source, ["a.md", "b.md"], waiting=timedelta(days=2))
    other_tenant = Tenant.objects.create(name="Other", slug="other")
    other_kb = knowledge_base_create(tenant=other_tenant, name="Theirs", slug="theirs")
    theirs = source_save(
        kb=other_kb, name="Their share", slug="theirs", kind="folder", config=dict(source.config)
    )
    hidden = held(theirs, ["t.md"], waiting=timedelta(days=3))
    ian = index_admin(tenant)

    board = ian.get("/admin/ingestion/ingestiontask/dashboard/")
    text = board.content.decode()
    section = text[text.index('id="held-deletions"') : text.index('id="anomalies"')]
    assert f"/admin/sources/syncrun/{old.pk}/change/" in section
    assert "Share" in section and ">2<" in section
    assert f"/admin/sources/syncrun/{hidden.pk}/change/" not in section
    assert "Their share" not in text

    # a run holding deletions for an hour is not late yet
    SyncRun.objects.filter(pk=old.pk).update(state=SyncRun.State.SUCCEEDED)
    held(source, ["c.md"], waiting=timedelta(hours=1))
    later = ian.get("/admin/ingestion/ingestiontask/dashboard/").content.decode()
    section = later[later.index('id="held-deletions"') : later.index('id="anomalies"')]
    assert "None: every deletion a sync run held was answered within 1 day." in words_of(section)


def words_of(text: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html.unescape(text)).split())
