"""Issue 37, item 7: a new revision uploaded on the document page says what happens to it next.
Where the knowledge base requires approval it does not go live when built: it waits for an
approver, and the message says so; elsewhere it goes live when built."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from kb.models import KnowledgeBase
from kb.roles import CONTENT_MANAGERS, ensure_roles
from tests.console.admin_world import staff
from tests.retrieval.factories import publish

pytestmark = pytest.mark.django_db


def upload_revision(kb: KnowledgeBase, *, approval: bool) -> list[str]:
    """A content manager uploads revision 2 of a live document, in a knowledge base that
    requires approval or not; the messages shown after."""
    ensure_roles(Group, Permission)
    built = publish(kb, "travel", "# Travel\n\nText.")
    KnowledgeBase.objects.filter(pk=kb.pk).update(require_approval=approval)
    client = Client()
    client.force_login(staff("carol", CONTENT_MANAGERS, kb.tenant))
    data: dict[str, Any] = {
        "title": "Travel",
        "access_groups": "",
        "new_revision": SimpleUploadedFile("travel-2026.md", b"# Travel\n\nNew."),
        "_continue": "1",
        "revisions-TOTAL_FORMS": "1",
        "revisions-INITIAL_FORMS": "1",
        "revisions-MIN_NUM_FORMS": "0",
        "revisions-MAX_NUM_FORMS": "1000",
        "revisions-0-id": str(built.revision_id),
        "revisions-0-document": str(built.document_id),
    }
    response = client.post(f"/admin/kb/document/{built.document_id}/change/", data, follow=True)
    assert response.status_code == 200
    return [str(m) for m in response.context["messages"]]


def test_with_approval_required_the_revision_waits_for_an_approver(kb: KnowledgeBase) -> None:
    shown = upload_revision(kb, approval=True)

    assert (
        "Revision 2 (travel-2026.md) uploaded; once built, it waits for approval by an index "
        "admin before it goes live." in shown
    ), shown
    assert not any("it goes live when built" in m for m in shown)


def test_without_approval_it_goes_live_when_built(kb: KnowledgeBase) -> None:
    assert "Revision 2 (travel-2026.md) uploaded; it goes live when built." in upload_revision(
        kb, approval=False
    )
