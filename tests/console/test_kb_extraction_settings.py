"""The knowledge base's extraction settings in the admin (issue 37): its OCR mode and whether
DOCX page headers and footers are indexed, on its settings page with help text, audited like
every settings change (its History and the timeline say each value before and after), and left
as they are by a post that does not carry them (a script, a page from before them)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from kb.access import Reader
from kb.models import KnowledgeBase, Tenant
from kb.timeline import kb_timeline

pytestmark = pytest.mark.django_db

EVERYONE = Reader(tenant_id=0, access_groups=frozenset(), all_groups=True)


def client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def settings_form(kb: KnowledgeBase, **changes: str) -> dict[str, str]:
    form = {
        "name": kb.name,
        "description": kb.description,
        "retention_days": str(kb.retention_days),
        "ocr_mode": kb.ocr_mode,
    }
    if kb.require_approval:
        form["require_approval"] = "on"
    if kb.extract_headers_footers:
        form["extract_headers_footers"] = "on"
    form.update(changes)
    return form


def test_the_settings_page_offers_both_settings_with_their_help(
    kb: KnowledgeBase, admin_user: User
) -> None:
    page = client_of(admin_user).get(f"/admin/kb/knowledgebase/{kb.pk}/change/").content.decode()
    for value, label in KnowledgeBase.OcrMode.choices:
        assert f'value="{value}"' in page and str(label) in page  # labels translate lazily
    default = page.split('value="pages_without_text"')[1].split(">")[0]
    assert "checked" in default  # the default is chosen
    assert "OCR reads the text of pictures." in page
    assert 'name="extract_headers_footers"' in page
    assert "Index the page headers and footers of word-processing documents" in page


def test_changing_them_is_saved_and_on_the_timeline(kb: KnowledgeBase, admin_user: User) -> None:
    root = client_of(admin_user)
    response = root.post(
        f"/admin/kb/knowledgebase/{kb.pk}/change/",
        settings_form(kb, ocr_mode="off", extract_headers_footers="on"),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    kb.refresh_from_db()
    assert (kb.ocr_mode, kb.extract_headers_footers) == ("off", True)

    [entry] = kb_timeline(kb=kb, reader=EVERYONE).entries
    assert entry.kind == "settings_changed" and entry.actor == "root"
    assert entry.detail == (
        "Changed OCR: pages without text only → off; index page headers and footers: off → on."
    )
    timeline = root.get(f"/admin/kb/knowledgebase/{kb.pk}/timeline/").content.decode()
    assert "Changed OCR: pages without text only → off; index page headers" in timeline


def test_a_post_without_the_ocr_mode_leaves_it_as_it_is(
    kb: KnowledgeBase, admin_user: User
) -> None:
    KnowledgeBase.objects.filter(pk=kb.pk).update(ocr_mode=KnowledgeBase.OcrMode.ALWAYS)
    kb.refresh_from_db()
    form = settings_form(kb, retention_days="14")
    del form["ocr_mode"]
    response = client_of(admin_user).post(f"/admin/kb/knowledgebase/{kb.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    kb.refresh_from_db()
    assert (kb.ocr_mode, kb.retention_days) == ("always", 14)
    [entry] = kb_timeline(kb=kb, reader=EVERYONE).entries
    assert entry.detail == "Changed retention days: 30 → 14."


def test_an_unknown_mode_is_refused_readably(kb: KnowledgeBase, admin_user: User) -> None:
    response = client_of(admin_user).post(
        f"/admin/kb/knowledgebase/{kb.pk}/change/", settings_form(kb, ocr_mode="sometimes")
    )
    assert response.status_code == 200
    assert "Select a valid choice. sometimes is not one of the available choices." in (
        response.content.decode()
    )
    kb.refresh_from_db()
    assert kb.ocr_mode == "pages_without_text"


def test_a_new_knowledge_base_keeps_the_settings_it_was_added_with(
    tenant: Tenant, admin_user: User
) -> None:
    response = client_of(admin_user).post(
        "/admin/kb/knowledgebase/add/",
        {
            "tenant": str(tenant.pk),
            "name": "Scans",
            "slug": "scans",
            "description": "",
            "retention_days": "30",
            "ocr_mode": "always",
            "extract_headers_footers": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    created = KnowledgeBase.objects.get(slug="scans")
    assert (created.ocr_mode, created.extract_headers_footers) == ("always", True)
