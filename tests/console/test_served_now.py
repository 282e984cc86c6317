"""One truth about what is served (issue 13, item 1). Every admin page that says what a build is
for asks `kb.selectors.builds.build_role_of`; these tests put each contradiction the issue saw next
to what search itself returns to a reader, on real PostgreSQL with the pipeline run in-process."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from kb.models import Build, Document, KnowledgeBase, Publication
from kb.roles import INDEX_ADMINS, ensure_roles
from kb.selectors.builds import build_roles
from kb.selectors.documents import document_build_rows
from kb.services.documents import document_delete, document_restore
from kb.services.index_versions import (
    index_version_activate,
    index_version_create,
    index_version_rollback,
)
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.console.admin_world import staff
from tests.helpers import run_pending, upload_text

pytestmark = pytest.mark.django_db(transaction=True)

# A build on the document page, in the Builds table (<tr data-build>) or the Revisions box
# (<div data-build>): its id, role kind and role label.
ROLE = re.compile(
    r'data-build="(\d+)".*?<b class="role canon-role-([a-z_]+)"[^>]*>([^<]*)</b>', re.DOTALL
)


def reader(kb: KnowledgeBase) -> Principal:
    """A reader of the tenant with no access groups (the documents here have none)."""
    return Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())


def served_by_search(kb: KnowledgeBase, query: str) -> set[int]:
    kb.refresh_from_db()
    return {hit.build_id for hit in search(principal=reader(kb), kb=kb, query=query).hits}


@pytest.fixture
def ian(kb: KnowledgeBase) -> Client:
    ensure_roles(Group, Permission)
    client = Client()
    client.force_login(staff("ian", INDEX_ADMINS, kb.tenant))
    return client


def page_roles(client: Client, document: Document) -> tuple[str, dict[str, set[tuple[str, str]]]]:
    """The document page, and per build id every (kind, label) it shows for that build."""
    html = client.get(f"/admin/kb/document/{document.pk}/change/").content.decode()
    roles: dict[str, set[tuple[str, str]]] = {}
    for build_id, kind, label in ROLE.findall(html):
        roles.setdefault(build_id, set()).add((kind, label))
    return html, roles


def progress_roles(client: Client, document: Document) -> dict[str, Any]:
    return client.get(f"/admin/kb/document/{document.pk}/progress/").json()


def assert_page_agrees_with_progress(client: Client, document: Document) -> dict[str, Any]:
    """Both boxes of the page and the progress JSON the script refreshes them from say the same
    role for every build."""
    _, roles = page_roles(client, document)
    data = progress_roles(client, document)
    for build in data["builds"]:
        shown = roles.get(str(build["id"]))
        assert shown == {(build["role_kind"], build["role"])}, (build, shown)
    assert set(roles) == {str(b["id"]) for b in data["builds"]}
    return data


def served_builds(data: dict[str, Any]) -> set[int]:
    return {b["id"] for b in data["builds"] if b["role_kind"] == "served"}


def test_after_a_new_revision_the_page_serves_what_search_returns(
    kb: KnowledgeBase, ian: Client
) -> None:
    upload_text(kb, "travel", "Train tickets are reimbursed in second class.")
    run_pending()
    document = Document.objects.get(key="travel")
    first = Build.objects.get(document=document, revision__number=1)

    # given a second revision uploaded and not built yet
    upload_text(kb, "travel", "Train tickets are reimbursed in first class.")
    second = Build.objects.get(document=document, revision__number=2)

    # then every box says r1 is served and r2 is queued, as search does
    data = assert_page_agrees_with_progress(ian, document)
    assert served_builds(data) == {first.pk} == served_by_search(kb, "train tickets")
    assert data["served"] == {"id": first.pk, "revision": 1, "index_version": 1}
    assert {b["id"]: b["role"] for b in data["builds"]}[second.pk] == "queued"
    assert data["status"] == "live r1 · r2 queued"

    # when it is built, r2 is served, on the page and by search
    run_pending()
    data = assert_page_agrees_with_progress(ian, document)
    assert served_builds(data) == {second.pk} == served_by_search(kb, "train tickets")
    assert {b["id"]: b["role"] for b in data["builds"]}[first.pk] == "superseded"
    assert data["status"] == "live r2"


def test_a_deleted_document_serves_nothing_and_keeps_its_build_for_restore(
    kb: KnowledgeBase, ian: Client, admin_user: User
) -> None:
    upload_text(kb, "travel", "Train tickets are reimbursed in second class.")
    run_pending()
    document = Document.objects.get(key="travel")
    build = Build.objects.get(document=document)

    document_delete(document_id=document.pk, actor=admin_user, reason="obsolete")

    assert served_by_search(kb, "train tickets") == set()
    html, _ = page_roles(ian, document)
    data = assert_page_agrees_with_progress(ian, document)
    assert served_builds(data) == set() and data["served"] is None
    assert {b["id"]: b["role"] for b in data["builds"]} == {
        build.pk: "kept for restore (document deleted)"
    }
    assert data["status"] == "deleted · nothing served · r1 kept for restore"
    assert "nothing served" in html and "served now" not in html

    # and a restore serves the kept build again
    document_restore(document_id=document.pk, actor=admin_user, reason="needed")
    data = assert_page_agrees_with_progress(ian, document)
    assert served_builds(data) == {build.pk} == served_by_search(kb, "train tickets")


def swapped_and_rolled_back(kb: KnowledgeBase, admin_user: User) -> Document:
    """v1 -> v2 (swap), a new revision built into both, then back to v1 (version rollback)."""
    upload_text(kb, "travel", "Train tickets are reimbursed in second class.")
    run_pending()
    v1 = kb.active_index_version
    assert v1 is not None
    v2 = index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-small",
        dimensions=128,
        chunk_size=400,
        chunk_overlap=50,
    )
    run_pending()
    index_version_activate(version_id=v2.pk, actor=admin_user, expected_active_id=v1.pk)
    upload_text(kb, "travel", "Train tickets are reimbursed in first class.")
    run_pending()
    index_version_rollback(kb_id=kb.pk, actor=admin_user, reason="recall dropped")
    return Document.objects.get(key="travel")


def test_after_a_version_rollback_exactly_one_build_is_served(
    kb: KnowledgeBase, ian: Client, admin_user: User
) -> None:
    document = swapped_and_rolled_back(kb, admin_user)
    # both versions point at r2: the stored states say "live" twice
    r2 = {b.index_version.number: b for b in Build.objects.filter(revision__number=2)}
    assert {b.state for b in r2.values()} == {Build.State.LIVE}

    data = assert_page_agrees_with_progress(ian, document)
    roles = {b["id"]: b["role"] for b in data["builds"]}
    assert served_builds(data) == {r2[1].pk} == served_by_search(kb, "train tickets")
    assert roles[r2[2].pk] == "kept for rollback (retired v2)"
    assert data["status"] == "live r2"


def test_builds_of_a_retired_version_never_say_live(
    kb: KnowledgeBase, ian: Client, admin_user: User
) -> None:
    document = swapped_and_rolled_back(kb, admin_user)
    retired = list(Build.objects.filter(document=document, index_version__number=2))
    pointed = Publication.objects.get(document=document, index_version__number=2).build_id

    # the document page: both boxes
    _, roles = page_roles(ian, document)
    for build in retired:
        for kind, label in roles[str(build.pk)]:
            assert "live" not in label.lower() and kind != "served", (build, label)
        if build.pk == pointed:
            assert roles[str(build.pk)] == {("kept_for_rollback", "kept for rollback (retired v2)")}

    # the builds list: the role first, the stored state apart and secondary
    listing = ian.get("/admin/kb/build/").content.decode()
    row = re.search(rf"<tr[^>]*>(?:(?!</tr>).)*?>{pointed}</a>(?:(?!</tr>).)*</tr>", listing, re.S)
    assert row is not None
    cells = row.group(0)
    assert 'class="field-role"><span class="canon-role-kept_for_rollback">kept for rollback' in (
        cells
    )
    stored = re.search(
        r'<td class="field-stored_state"><span class="canon-raw-state"[^>]*>(\w+)<', cells
    )
    assert stored is not None and stored.group(1) == "live"
    assert "Stored state" in listing

    # publication events name the build by what it is for now
    events = ian.get("/admin/kb/publicationevent/").content.decode()
    assert f"build {pointed} (r2): " in events
    assert "kept for rollback (retired v2)" in events and "served now" in events


def test_roles_of_many_builds_cost_one_query(
    kb: KnowledgeBase, admin_user: User, django_assert_num_queries: Any
) -> None:
    swapped_and_rolled_back(kb, admin_user)
    document = Document.objects.get(key="travel")
    with django_assert_num_queries(1):
        rows = document_build_rows(document=document)
    assert len(rows) == 4
    builds = list(Build.objects.select_related("kb", "document", "index_version", "revision"))
    with django_assert_num_queries(1):
        roles = build_roles(builds=builds)
    assert {pk: role.label for pk, role in roles.items()} == {b.pk: p["role"] for b, p in rows}
