"""Issue 26, item 9 (part): chunks counted from 1 on every page, "Knowledge base" rather than
"Kb", a settings change that says the values before and after, times marked UTC, and the index
admin's internals (pipeline, vector storage) not shown to a content manager."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from kb.models import Build, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from tests.console.admin_world import staff
from tests.retrieval.factories import publish

pytestmark = pytest.mark.django_db


def client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_chunks_count_from_one_on_every_page(kb: KnowledgeBase, admin_user: User) -> None:
    build = publish(kb, "travel", "Train tickets are reimbursed in second class.")
    client = client_of(admin_user)
    search = client.get(
        f"/admin/kb/knowledgebase/{kb.pk}/search/", {"mode": "keyword", "query": "tickets"}
    ).content.decode()
    assert "r1, chunk 1</a>" in search and "chunk 0" not in search
    chunks = client.get(f"/admin/kb/chunk/of-build/{build.pk}/").content.decode()
    assert re.search(r'<tr id="chunk-0">\s*<td class="num">1</td>', chunks)
    assert ">#1</a>" in chunks and ">#0</a>" not in chunks
    listing = client.get(f"/admin/kb/chunk/?build__id__exact={build.pk}").content.decode()
    assert "column-number" in listing and "column-ordinal" not in listing


def test_words_a_content_manager_reads(kb: KnowledgeBase, admin_user: User) -> None:
    ensure_roles(Group, Permission)
    build: Build = publish(kb, "travel", "Train tickets are reimbursed in second class.")
    carol = client_of(staff("carol", CONTENT_MANAGERS, kb.tenant))
    ian = client_of(staff("ian", INDEX_ADMINS, kb.tenant))

    page = carol.get(f"/admin/kb/document/{build.document_id}/change/").content.decode()
    assert "Knowledge base:" in page and "Kb:" not in page
    assert f'href="/admin/kb/knowledgebase/{kb.pk}/home/"' in page
    chunk = build.chunks.get()
    for url in (
        f"/admin/kb/build/{build.pk}/change/",
        f"/admin/kb/chunk/{chunk.pk}/change/",
        "/admin/kb/build/",
        "/admin/kb/chunk/",
    ):
        shown = client_of(admin_user).get(url).content.decode()
        assert "Knowledge base" in shown and not re.search(r">\s*Kb\b", shown), url

    carol_home = carol.get(f"/admin/kb/knowledgebase/{kb.pk}/home/").content.decode()
    assert "setting-pipeline" not in carol_home and "setting-vector-storage" not in carol_home
    assert "setting-model" in carol_home
    assert "building in v1</span>" in carol_home  # a re-index has its own bar
    assert "setting-pipeline" in ian.get(f"/admin/kb/knowledgebase/{kb.pk}/home/").content.decode()

    # a settings change says on / off, and the timeline's times say UTC
    root = client_of(admin_user)
    form = {
        "name": kb.name,
        "description": kb.description,
        "require_approval": "on",
        "retention_days": kb.retention_days,
    }
    assert root.post(f"/admin/kb/knowledgebase/{kb.pk}/change/", form).status_code == 302
    timeline = root.get(f"/admin/kb/knowledgebase/{kb.pk}/timeline/").content.decode()
    assert "Changed require approval: off → on." in timeline
    assert re.search(r'class="when">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC<', timeline)
