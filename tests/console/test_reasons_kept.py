"""Issue 26, item 10: the reason a retry asks for is in the document's History, as its page
promises; *New index version…* asks why, the timeline says it, and its breadcrumb names the
knowledge base."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from kb.models import Build, KnowledgeBase
from tests.helpers import run_pending
from tests.kb.test_swap_with_known_failures import upload_broken

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_retry_reason_is_in_the_document_history(kb: KnowledgeBase, admin_user: User) -> None:
    scan = upload_broken(kb, "scan")
    run_pending()
    build = Build.objects.get(revision=scan)
    client = Client()
    client.force_login(admin_user)
    url = f"/admin/kb/document/{scan.document_id}/retry/{build.pk}/"
    assert "Kept in the document" in client.get(url).content.decode()
    client.post(url, {"reason": "the parser was fixed"})
    page = client.get(f"/admin/kb/document/{scan.document_id}/change/").content.decode()
    history = page.split('id="history"')[1]
    assert "retry" in history and "the parser was fixed" in history and "root" in history
    progress = client.get(f"/admin/kb/document/{scan.document_id}/progress/").json()
    assert "the parser was fixed" in progress["history_html"]


def test_a_new_index_version_says_why(kb: KnowledgeBase, admin_user: User) -> None:
    client = Client()
    client.force_login(admin_user)
    url = f"/admin/kb/knowledgebase/{kb.pk}/index-versions/new/"
    form = client.get(url).content.decode()
    assert f'<a href="/admin/kb/knowledgebase/{kb.pk}/change/">{kb}</a>' in form
    assert 'name="reason"' in form
    response = client.post(
        url,
        {
            "provider": "hash",
            "model": "",
            "dimensions": "",
            "chunk_size": 400,
            "chunk_overlap": 50,
            "vector_storage": "vector",
            "reason": "smaller chunks for the FAQ",
        },
    )
    assert response.status_code == 302
    timeline = client.get(f"/admin/kb/knowledgebase/{kb.pk}/timeline/").content.decode()
    assert "smaller chunks for the FAQ" in timeline
