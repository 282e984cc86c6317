"""Issue 26, item 2: a document page left open writes back only what its user changed there,
never a value the page did not show current. The title the parse stage found after the page was
opened survives a Save of another field; an edit of a field someone changed meanwhile is refused
with the value it has now, and goes through on the next Save; the service compares and sets
under the document lock."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from kb.models import Document, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, ensure_roles
from kb.services.base import ActionRefused
from kb.services.documents import document_update
from tests.console.admin_world import staff
from tests.retrieval.factories import build, upload

pytestmark = pytest.mark.django_db

INLINE = {"revisions-TOTAL_FORMS": "0", "revisions-INITIAL_FORMS": "0"}
RESOURCE = "20.4. Resource Consumption\n\nshared_buffers sets the memory for shared buffers.\n"


@pytest.fixture
def carol(kb: KnowledgeBase) -> User:
    ensure_roles(Group, Permission)
    return staff("carol", CONTENT_MANAGERS, kb.tenant, groups=["finance"])


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def page_values(client: Client, document: Document) -> dict[str, Any]:
    """What the change page posts back as rendered: each field and the value it was shown
    with (`initial-<field>`)."""
    page = client.get(f"/admin/kb/document/{document.pk}/change/")
    form = page.context["adminform"].form
    values: dict[str, Any] = {**INLINE, "_continue": "1"}
    for name in ("title", "access_groups"):
        shown = form[name].value()
        shown = ",".join(shown) if isinstance(shown, list) else shown
        values[name] = values[f"initial-{name}"] = shown
        rendered = f'name="initial-{name}"' + (f' value="{html.escape(shown)}"' if shown else "")
        assert rendered in page.content.decode()
    return values


def test_a_page_opened_before_the_parse_keeps_the_extracted_title_on_save(
    kb: KnowledgeBase, carol: User
) -> None:
    # given a document uploaded without a title, its page opened at once: the title is the key
    revision = upload(kb, "runtime-config-resource", RESOURCE, title="runtime-config-resource")
    document = revision.document
    client = _client(carol)
    form = page_values(client, document)
    assert form["title"] == "runtime-config-resource"

    # when the build parses the file (its title is taken) and the page is then saved with new
    # access groups
    build(revision)
    document.refresh_from_db()
    assert document.title == "20.4. Resource Consumption"
    saved = client.post(
        f"/admin/kb/document/{document.pk}/change/", {**form, "access_groups": "finance"}
    )

    # then the groups change and the title is the file's, not the key the page still held
    assert saved.status_code == 302
    document.refresh_from_db()
    assert (document.title, document.access_groups) == ("20.4. Resource Consumption", ["finance"])
    entry = LogEntry.objects.filter(object_id=str(document.pk)).latest("id")
    assert entry.get_change_message() == "Changed access groups."
    # and the progress JSON the page polls carries the title, for the untouched field
    progress = client.get(f"/admin/kb/document/{document.pk}/progress/").json()
    assert progress["title"] == "20.4. Resource Consumption"


def test_an_edit_of_a_field_changed_meanwhile_is_refused_then_saved_on_the_next_try(
    kb: KnowledgeBase, carol: User
) -> None:
    document = build(upload(kb, "travel", "# Travel\n\nTrains.", title="Travel policy")).document
    client = _client(carol)
    form = page_values(client, document)
    Document.objects.filter(pk=document.pk).update(title="Travel rules")  # someone else

    url = f"/admin/kb/document/{document.pk}/change/"
    refused = client.post(url, {**form, "title": "Travel policy 2026"})
    assert refused.status_code == 200
    assert "Changed since you opened this page: it is now “Travel rules”." in html.unescape(
        refused.content.decode()
    )
    document.refresh_from_db()
    assert document.title == "Travel rules"  # nothing written

    # the page now shows the current value as the one it compares with: saving again works
    again = refused.context["adminform"].form
    assert again["title"].value() == "Travel policy 2026"
    assert 'name="initial-title" value="Travel rules"' in refused.content.decode()
    saved = client.post(
        url, {**form, "title": "Travel policy 2026", "initial-title": "Travel rules"}
    )
    assert saved.status_code == 302
    document.refresh_from_db()
    assert document.title == "Travel policy 2026"


def test_a_post_without_the_page_values_is_compared_with_what_is_stored(
    kb: KnowledgeBase, carol: User
) -> None:
    document = build(upload(kb, "leave", "# Leave\n\nDays.", title="Leave")).document
    client = _client(carol)
    response = client.post(
        f"/admin/kb/document/{document.pk}/change/",
        {"title": "Leave policy", "access_groups": "", **INLINE},
    )
    assert response.status_code == 302
    document.refresh_from_db()
    assert document.title == "Leave policy"


def test_the_service_compares_and_sets_under_the_document_lock(kb: KnowledgeBase) -> None:
    document = upload(kb, "travel", "Trains.", title="Travel").document
    Document.objects.filter(pk=document.pk).update(title="Travel rules")
    with pytest.raises(ActionRefused, match="title of travel changed since you opened its page"):
        document_update(document=document, title="Mine", seen={"title": "Travel"})
    # a field not given is never written, whatever the caller's copy holds
    document.title = "stale"
    document_update(document=document, access_groups=["finance"], seen={"access_groups": []})
    document.refresh_from_db()
    assert (document.title, document.access_groups) == ("Travel rules", ["finance"])
