"""The documents side's dead ends and paper cuts (issue 13, items 6, 8 and 10): styled refusals
that name the missing permission and the role with it, the delete page's restore date, file names
as uploaded, extracted titles for bulk uploads, the only knowledge base preselected, a refused
Add that keeps its file, uploads in the History, times with seconds, sizes for people."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from kb.models import Document, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from tests.console.admin_world import staff
from tests.retrieval.factories import build, publish, upload

pytestmark = pytest.mark.django_db

HTML = b"<html><head><title>Index Types</title></head><body><main><h1>Index Types</h1>" + (
    b"<p>B-tree, hash, GiST and GIN.</p></main></body></html>"
)


@pytest.fixture
def carol(kb: KnowledgeBase) -> User:
    ensure_roles(Group, Permission)
    return staff("carol", CONTENT_MANAGERS, kb.tenant)


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_refused_approve_link_is_an_admin_page_naming_the_permission_and_role(
    kb: KnowledgeBase, carol: User
) -> None:
    publish(kb, "travel", "# Travel\n\nFirst.")
    KnowledgeBase.objects.filter(pk=kb.pk).update(require_approval=True)
    ready = build(upload(kb, "travel", "# Travel\n\nSecond."))
    response = _client(carol).get(
        f"/admin/kb/document/{ready.document_id}/approve/{ready.pk}/",
        HTTP_REFERER="http://testserver/admin/kb/document/",
    )
    assert response.status_code == 403
    page = response.content.decode()
    assert 'id="site-name"' in page  # the admin's base_site
    assert "Can approve a ready build" in page and "kb.approve_build" in page
    assert "Index admins have it: ask an index admin" in page
    assert "Your roles: Content managers." in page
    assert 'href="http://testserver/admin/kb/document/"' in page  # back where they came from
    # and the document says who approves
    change = _client(carol).get(f"/admin/kb/document/{ready.document_id}/change/")
    assert "r2 awaiting approval by an index admin" in change.content.decode()


def test_a_refusal_outside_the_admin_stays_django_s_own(kb: KnowledgeBase) -> None:
    from django.core.exceptions import PermissionDenied
    from django.test import RequestFactory

    from console.admin.refusals import permission_denied

    request = RequestFactory().get("/elsewhere")
    request.user = User(username="x")
    assert b"403 Forbidden" in permission_denied(request, PermissionDenied()).content


def test_the_delete_page_says_until_when_restore_is_possible_with_a_red_button(
    kb: KnowledgeBase, carol: User
) -> None:
    built = publish(kb, "travel", "# Travel\n\nText.")
    page = _client(carol).get(f"/admin/kb/document/{built.document_id}/soft-delete/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "restorable until" in html and "UTC (30 days from now" in html
    assert "at purge" in html and "removed for good" in html
    assert "delete-confirmation" in html and 'class="canon-danger"' in html
    assert "Yes, delete Travel" in html  # the title as written


def test_bulk_uploads_keep_file_names_and_take_the_extracted_title(
    kb: KnowledgeBase, carol: User
) -> None:
    client = _client(carol)
    form = client.get("/admin/kb/document/upload/")
    assert form.context["form"]["kb"].value() == kb.pk  # the only knowledge base, preselected
    response = client.post(
        "/admin/kb/document/upload/",
        {
            "kb": kb.pk,
            "access_groups": "",
            "files": [
                SimpleUploadedFile("Indexes-types.html", HTML),
                SimpleUploadedFile("x.pdf", b"not a pdf"),
            ],
        },
        follow=True,
    )
    shown = [str(m) for m in response.context["messages"]]
    assert any(m.startswith("New document Indexes-types from Indexes-types.html (") for m in shown)
    assert any(m.startswith("Not uploaded: x.pdf: ") for m in shown), shown
    document = Document.objects.get(key="Indexes-types")
    assert document.title == document.key  # none given ...
    build(document.revisions.get())
    document.refresh_from_db()
    assert document.title == "Index Types"  # ... so the parse stage put the file's own
    entry = LogEntry.objects.get(object_id=str(document.pk))
    assert entry.get_change_message().startswith(
        "Added with Upload files; uploaded Indexes-types.html ("
    )
    history = client.get(f"/admin/kb/document/{document.pk}/history/").content.decode()
    assert "uploaded Indexes-types.html" in history


def test_a_refused_add_keeps_the_chosen_file_for_this_session_only(
    kb: KnowledgeBase, carol: User
) -> None:
    publish(kb, "taken", "# Taken\n\nText.")
    client = _client(carol)
    data = {
        "kb": kb.pk,
        "key": "taken",
        "title": "",
        "access_groups": "",
        "_continue": "1",
        "revisions-TOTAL_FORMS": "0",
        "revisions-INITIAL_FORMS": "0",
    }
    refused = client.post(
        "/admin/kb/document/add/", {**data, "file": SimpleUploadedFile("Handbook.md", b"# Hi\n\nx")}
    )
    assert refused.status_code == 200
    html = refused.content.decode()
    assert "Kept from your last try: Handbook.md (" in html
    token = refused.context["adminform"].form["kept_upload"].value()
    assert token
    # another user's session cannot redeem it
    ian = _client(staff("ian", INDEX_ADMINS, kb.tenant))
    stolen = ian.post("/admin/kb/document/add/", {**data, "key": "stolen", "kept_upload": token})
    assert stolen.status_code == 200
    assert "no longer kept; choose it again" in stolen.content.decode()
    assert not Document.objects.filter(key="stolen").exists()
    # the same session can: no file chosen again
    added = client.post(
        "/admin/kb/document/add/", {**data, "key": "handbook", "kept_upload": token}
    )
    assert added.status_code == 302, added.context["adminform"].form.errors
    document = Document.objects.get(key="handbook")
    assert document.revisions.get().original_name == "Handbook.md"
    assert LogEntry.objects.get(object_id=str(document.pk)).get_change_message() == (
        "Added; uploaded Handbook.md (7\xa0bytes) as revision 1."
    )


def test_a_new_revision_is_in_the_history_and_pages_have_no_save_and_add_another(
    kb: KnowledgeBase, carol: User
) -> None:
    built = publish(kb, "travel", "# Travel\n\nText.")
    client = _client(carol)
    url = f"/admin/kb/document/{built.document_id}/change/"
    page = client.get(url).content.decode()
    assert (
        "_addanother" not in page
        and "_addanother" not in client.get("/admin/kb/document/add/").content.decode()
    )
    assert "bytes" in page  # sizes for people (filesizeformat), not a raw count
    response = client.post(
        url,
        {
            "title": "Travel policy",
            "access_groups": "",
            "new_revision": SimpleUploadedFile("travel-2026.md", b"# Travel\n\nNew."),
            "_continue": "1",
            "revisions-TOTAL_FORMS": "1",
            "revisions-INITIAL_FORMS": "1",
            "revisions-MIN_NUM_FORMS": "0",
            "revisions-MAX_NUM_FORMS": "1000",
            "revisions-0-id": str(built.revision_id),
            "revisions-0-document": str(built.document_id),
        },
        follow=True,
    )
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    assert "Revision 2 (travel-2026.md) uploaded; it goes live when built." in shown
    entry = LogEntry.objects.filter(object_id=str(built.document_id)).latest("id")
    assert entry.get_change_message() == (
        "Changed title; uploaded travel-2026.md (14\xa0bytes) as revision 2."
    )
    # times with seconds
    history = client.get(f"/admin/kb/document/{built.document_id}/history/").content.decode()
    assert entry.action_time.strftime("%Y-%m-%d %H:%M:%S") in history
