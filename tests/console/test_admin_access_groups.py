"""Access groups decide who reads a document's content, in the admin as in the API: a staff user
sees only documents with no groups or with a group they hold (superusers: all), and may only put
a document behind groups they hold. One rule (`kb.access.may_read_groups` and its filter form
`readable_documents_q`), one source of a session user's groups (`kb.access.reader_of_user`),
so the admin and the API cannot disagree."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from kb.models import Build, Document, IndexVersion, TenantMembership
from kb.services.index_versions import index_version_create
from retrieval.models import ApiKey
from retrieval.principals import api_key_create, principal_from_user
from tests.console.admin_world import MARK_HR, World, build_world
from tests.retrieval.factories import api, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db: None) -> World:
    return build_world()


def _listed(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def _api_keys(client: Client) -> set[str]:
    response = client.get("/api/v1/kbs/handbook/documents/")
    assert response.status_code == 200
    return {d["key"] for d in response.json()["results"]}


def _admin_ids(client: Client) -> set[int]:
    response = client.get("/admin/kb/document/?all=")
    return {row.pk for row in response.context["cl"].result_list}


def test_a_content_manager_outside_hr_sees_the_hr_document_nowhere(world: World) -> None:
    """Issue 14 item 7, as reported: carol (no hr) saw the hr document in the admin while the
    API hid it from her."""
    carol = world.client("carol")
    hr = world.hr_doc
    for url in [
        "/admin/kb/document/",
        "/admin/kb/build/",
        "/admin/kb/publicationevent/",
        "/admin/ingestion/ingestiontask/",
        f"/admin/kb/knowledgebase/{world.kb_b.pk}/change/",
    ]:
        page = _listed(carol, url)
        assert MARK_HR not in page.lower() and "salaries" not in page, url
    assert "vacation" in _listed(carol, "/admin/kb/document/")
    assert _api_keys(carol) == {"vacation"}
    # the hr document's pages answer as a document that does not exist would
    missing = 999_999
    build = Build.objects.filter(document=hr).first()
    assert build is not None
    for suffix in ["change/", "history/", "progress/", "soft-delete/", "restore/"]:
        theirs, absent = (
            carol.get(f"/admin/kb/document/{hr.pk}/{suffix}"),
            carol.get(f"/admin/kb/document/{missing}/{suffix}"),
        )
        assert (theirs.status_code, theirs.get("Location")) == (
            absent.status_code,
            absent.get("Location"),
        ), suffix
    for action in ["approve", "rollback", "retry"]:
        theirs = carol.get(f"/admin/kb/document/{hr.pk}/{action}/{build.pk}/")
        absent = carol.get(f"/admin/kb/document/{missing}/{action}/{build.pk}/")
        assert theirs.status_code == absent.status_code, action
    assert carol.get(f"/admin/kb/build/{build.pk}/change/")["Location"] == "/admin/"
    assert carol.get(f"/api/v1/documents/{hr.pk}").status_code == 404


def test_a_content_manager_in_hr_sees_and_manages_it(world: World) -> None:
    harry = world.client("harry")
    assert "salaries" in _listed(harry, "/admin/kb/document/")
    assert MARK_HR in _listed(harry, f"/admin/kb/document/{world.hr_doc.pk}/change/").lower()
    assert harry.get(f"/admin/kb/document/{world.hr_doc.pk}/progress/").status_code == 200
    assert "salaries" in _listed(harry, "/admin/kb/build/")
    assert _api_keys(harry) == {"vacation", "salaries"}
    assert harry.get(f"/api/v1/documents/{world.hr_doc.pk}").status_code == 200


def test_the_admin_and_the_api_show_every_user_the_same_documents(world: World) -> None:
    """For each kind of user and key, the admin's document list, the API's (session and key)
    and the rule itself agree, document by document."""
    Document.objects.create(kb=world.kb_b, key="legal", title="Legal", access_groups=["legal"])
    Document.objects.create(kb=world.kb_b, key="both", title="Both", access_groups=["hr", "legal"])
    root = User.objects.create_superuser("root", "", "a-long-test-password")
    TenantMembership.objects.create(user=root, tenant=world.tenant_b)
    documents = list(Document.objects.filter(kb=world.kb_b))
    for user in [*world.users.values(), root]:
        client = Client()
        client.force_login(user)
        principal = principal_from_user(user)
        assert principal is not None
        expected = {d.key for d in documents if principal.may_read_groups(d.access_groups)}
        assert {d.key for d in documents if d.pk in _admin_ids(client)} == expected, user
        assert _api_keys(client) == expected, user
        _, plaintext = api_key_create(
            tenant=world.tenant_b, name=f"{user}-key", access_groups=principal.access_groups
        )
        if not user.is_superuser:  # a key reads its own groups; a superuser reads every group
            assert _api_keys(api(plaintext)) == expected, user
    assert {d.key for d in documents if d.pk in _admin_ids(world.client("harry"))} == {
        "vacation",
        "salaries",
        "both",
    }


INLINE = {"revisions-TOTAL_FORMS": "0", "revisions-INITIAL_FORMS": "0"}


def _add(client: Client, **fields: Any) -> Any:
    data = {"kb": "", "key": "new", "title": "New", "access_groups": "", **INLINE, **fields}
    data["file"] = SimpleUploadedFile("new.txt", b"Some text.", content_type="text/plain")
    return client.post("/admin/kb/document/add/", data)


def test_documents_can_be_put_only_behind_groups_one_holds(world: World) -> None:
    carol, harry = world.client("carol"), world.client("harry")
    kb = world.kb_b.pk
    refused = _add(carol, kb=kb, access_groups="hr")
    assert refused.status_code == 200
    assert "You may only assign access groups you hold; not: hr." in refused.content.decode()
    assert "Groups you may assign: none." in refused.content.decode()
    assert not Document.objects.filter(key="new").exists()
    assert _add(harry, kb=kb, access_groups="hr").status_code == 302
    assert Document.objects.get(key="new").access_groups == ["hr"]
    # editing keeps the groups a document has; only added ones must be held
    both = Document.objects.create(
        kb=world.kb_b, key="both", title="Both", access_groups=["hr", "legal"]
    )
    url = f"/admin/kb/document/{both.pk}/change/"
    edit = {"title": "Both, renamed", "access_groups": "hr,legal", **INLINE}
    assert harry.post(url, edit).status_code == 302
    added = harry.post(url, {**edit, "access_groups": "hr,legal,finance"})
    assert "not: finance." in added.content.decode()
    unreadable = harry.post(url, {**edit, "access_groups": "legal"})  # he would lose sight of it
    assert "you could not read the document otherwise" in unreadable.content.decode()
    public = harry.post(url, {**edit, "access_groups": ""})  # everyone, legal's readers too
    assert "you do not hold: legal." in public.content.decode()
    both.refresh_from_db()
    assert (both.title, both.access_groups) == ("Both, renamed", ["hr", "legal"])
    assert harry.post(url, {**edit, "access_groups": "hr"}).status_code == 302  # narrowing
    assert harry.post(url, {**edit, "access_groups": ""}).status_code == 302  # he holds all
    both.refresh_from_db()
    assert both.access_groups == []
    # a content manager without hr may not restrict an open document to it either
    vacation = f"/admin/kb/document/{world.open_doc.pk}/change/"
    restricted = carol.post(vacation, {"title": "V", "access_groups": "hr", **INLINE})
    assert "not: hr." in restricted.content.decode()
    world.open_doc.refresh_from_db()
    assert world.open_doc.access_groups == []


def test_uploading_many_files_follows_the_same_rule(world: World) -> None:
    carol = world.client("carol")
    url = "/admin/kb/document/upload/"
    files = [SimpleUploadedFile("memo.txt", b"A memo.", content_type="text/plain")]
    page = carol.post(url, {"kb": world.kb_b.pk, "access_groups": "hr", "files": files})
    assert "You may only assign access groups you hold; not: hr." in page.content.decode()
    assert not Document.objects.filter(key="memo").exists()
    # a file named like the hr document is refused, not added as its revision
    revisions = world.hr_doc.revisions.count()
    salaries = SimpleUploadedFile("salaries.txt", b"New pay.", content_type="text/plain")
    done = carol.post(url, {"kb": world.kb_b.pk, "files": [salaries]}, follow=True)
    assert "restricted to access groups you do not hold" in done.content.decode()
    assert world.hr_doc.revisions.count() == revisions


def test_knowledge_base_pages_count_every_document_but_name_only_readable_ones(
    world: World,
) -> None:
    """A swap covers every document, so its counts are whole; names are the reader's."""
    ian = world.client("ian")
    for document in (world.open_doc, world.hr_doc):
        build = Build.objects.filter(document=document).order_by("-id").first()
        assert build is not None
        Build.objects.filter(pk=build.pk).update(state=Build.State.FAILED, error="boom")
    version = index_version_create(
        kb_id=world.kb_b.pk,
        actor=None,
        provider="hash",
        model="canon-hash-small",
        dimensions=128,
        chunk_size=800,
        chunk_overlap=100,
    )
    page = _listed(ian, f"/admin/kb/knowledgebase/{world.kb_b.pk}/change/")
    assert "vacation r2: boom" in page and "salaries" not in page
    assert "1 failed in documents of access groups you do not hold" in page
    swap = _listed(
        ian, f"/admin/kb/knowledgebase/{world.kb_b.pk}/index-versions/{version.pk}/activate/"
    )
    assert "vacation: no live build yet" in swap and "salaries" not in swap
    assert "1 more in documents of access groups you do not hold" in swap
    assert "2 missing" in swap  # the coverage count is the whole knowledge base's
    assert IndexVersion.objects.filter(kb=world.kb_b).count() == 2


def test_the_dashboard_counts_every_task_but_names_only_readable_documents(
    world: World,
) -> None:
    ian = world.client("ian")
    upload(world.kb_b, "vacation", "Third revision.")
    upload(world.kb_b, "salaries", f"{MARK_HR} third revision.")
    from work.models import IngestionTask

    IngestionTask.objects.filter(status="queued").update(status="retry_wait", last_error="x")
    page = _listed(ian, "/admin/ingestion/ingestiontask/dashboard/")
    assert "vacation" in page and "salaries" not in page
    assert "(a document of access groups you do not hold)" in page


def test_an_api_key_gets_only_groups_its_maker_holds(world: World) -> None:
    """A key reads what its groups allow, so an index admin outside hr cannot make one that
    reads the hr document."""
    ian = world.client("ian")
    data = {
        "tenant": world.tenant_b.pk,
        "name": "reader",
        "knowledge_bases": [world.kb_b.pk],
        "access_groups": "hr",
        "expires_at_0": "",
        "expires_at_1": "",
    }
    refused = ian.post("/admin/retrieval/apikey/add/", data)
    assert "You may only assign access groups you hold; not: hr." in refused.content.decode()
    assert (
        ian.post("/admin/retrieval/apikey/add/", {**data, "access_groups": ""}).status_code == 302
    )
    key = ApiKey.objects.get(name="reader")
    assert key.access_groups == []
    edited = ian.post(f"/admin/retrieval/apikey/{key.pk}/change/", {**data, "name": "reader"})
    assert "not: hr." in edited.content.decode()
    # a group the key has already may stay when someone outside it edits the key
    legal, _ = api_key_create(tenant=world.tenant_b, name="legal-bot", access_groups=["legal"])
    renamed = {**data, "name": "legal-bot-2", "access_groups": "legal"}
    assert ian.post(f"/admin/retrieval/apikey/{legal.pk}/change/", renamed).status_code == 302
    legal.refresh_from_db()
    assert (legal.name, legal.access_groups) == ("legal-bot-2", ["legal"])
