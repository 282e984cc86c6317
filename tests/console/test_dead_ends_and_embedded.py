"""Issue 26, items 14 and 15: no dead ends (no "View site" link to nothing, the bare host goes to
the admin, an unknown admin address is an admin page with a way home); the dashboard says what a
local model embedded rather than "No provider calls recorded"."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from kb.models import KnowledgeBase
from kb.roles import CONTENT_MANAGERS, ensure_roles
from tests.console.admin_world import staff
from tests.kb.publishing import publish

pytestmark = pytest.mark.django_db


def test_no_view_site_link_and_the_bare_host_goes_to_the_admin(admin_user: User) -> None:
    client = Client()
    client.force_login(admin_user)
    page = client.get("/admin/").content.decode()
    assert "View site" not in page
    response = Client().get("/")
    assert response.status_code == 302 and response["Location"] == "/admin/"


def test_an_unknown_admin_address_is_an_admin_page_with_a_way_home(kb: KnowledgeBase) -> None:
    ensure_roles(Group, Permission)
    carol = Client()
    carol.force_login(staff("carol", CONTENT_MANAGERS, kb.tenant))
    response = carol.get("/admin/kb/no-such-page/", HTTP_REFERER="http://testserver/admin/kb/")
    page = response.content.decode()
    assert response.status_code == 404
    assert "Page not found" in page and "/admin/kb/no-such-page/" in page
    assert 'id="not-found-home" href="/admin/"' in page
    assert 'id="not-found-back" href="http://testserver/admin/kb/"' in page
    assert 'id="user-tools"' in page  # the admin's header: log out, password, theme
    # outside the admin, and signed out, Django's own answer
    assert Client().get("/nothing-here").status_code == 404
    assert "Page not found" not in Client().get("/nothing-here").content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_dashboard_counts_what_a_local_model_embedded(
    kb: KnowledgeBase, admin_user: User
) -> None:
    publish(kb, "travel", "Train tickets are reimbursed in second class. " * 30)
    client = Client()
    client.force_login(admin_user)
    page = client.get("/admin/ingestion/ingestiontask/dashboard/").content.decode()
    assert "No provider calls recorded" not in page
    version = kb.active_index_version
    assert version is not None
    assert f"<td>{version.provider} / {version.model}</td>" in page
    assert '<td class="embedded-chunks">0</td>' not in page and "embedded-chunks" in page
