"""The admin's language: the switcher's choice (Django's language cookie), else the browser's,
else English; dates in the language's formats; the APIs in English whatever the client asks."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from kb.models import KnowledgeBase, TenantMembership
from kb.roles import CONTENT_MANAGERS, ensure_roles
from kb.uploads import request_max_bytes
from tests.retrieval.factories import upload

pytestmark = pytest.mark.django_db

CHINESE_BROWSER = "zh-CN,zh;q=0.9,en;q=0.8"
# A moment as the Chinese pages write it: 2026年12月7日 09:41:20 UTC
CHINESE_MOMENT = re.compile(r"\d{4}年\d{1,2}月\d{1,2}日 \d{2}:\d{2}:\d{2} UTC")
ENGLISH_MOMENT = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC")


@pytest.fixture
def content_manager(kb: KnowledgeBase) -> Client:
    ensure_roles(Group, Permission)
    user = User.objects.create_user("cm-language", password="a-long-test-password", is_staff=True)
    user.groups.add(Group.objects.get(name=CONTENT_MANAGERS))
    TenantMembership.objects.create(user=user, tenant=kb.tenant)
    client = Client()
    client.force_login(user)
    return client


def test_a_chinese_browser_gets_the_admin_in_chinese(
    content_manager: Client, kb: KnowledgeBase
) -> None:
    upload(kb, "travel", "Train tickets are reimbursed.")
    home = content_manager.get(
        f"/admin/kb/knowledgebase/{kb.pk}/home/", HTTP_ACCEPT_LANGUAGE=CHINESE_BROWSER
    )
    page = home.content.decode()
    assert home.status_code == 200
    assert '<html lang="zh-hans"' in page
    assert "知识库" in page and "时间线" in page and "测试搜索" in page
    assert "Timeline" not in page and "Test search" not in page
    assert home.headers["Content-Language"] == "zh-hans"
    # the timeline's moments in the Chinese format, to the second
    assert CHINESE_MOMENT.search(page), page


def test_english_stays_the_default(content_manager: Client, kb: KnowledgeBase) -> None:
    upload(kb, "travel", "Train tickets are reimbursed.")
    headers: list[dict[str, Any]] = [{}, {"HTTP_ACCEPT_LANGUAGE": "en-US,en;q=0.9"}]
    for header in headers:
        page = content_manager.get(f"/admin/kb/knowledgebase/{kb.pk}/home/", **header)
        text = page.content.decode()
        assert "Timeline" in text and "Test search" in text
        assert "时间线" not in text
        assert ENGLISH_MOMENT.search(text)


def test_the_switcher_keeps_the_choice_over_the_browser(
    content_manager: Client, kb: KnowledgeBase
) -> None:
    """The header's switcher posts to set_language, which sets Django's language cookie (kept a
    year) and goes back to the page; the choice then wins over the browser's language."""
    home = f"/admin/kb/knowledgebase/{kb.pk}/home/"
    page = content_manager.get(home, HTTP_ACCEPT_LANGUAGE=CHINESE_BROWSER).content.decode()
    assert 'id="language-en"' in page  # the switcher offers English on a Chinese page
    answer = content_manager.post(
        "/i18n/setlang/", {"language": "en", "next": home}, HTTP_ACCEPT_LANGUAGE=CHINESE_BROWSER
    )
    assert answer.status_code == 302 and answer.headers["Location"] == home
    cookie = answer.cookies[settings.LANGUAGE_COOKIE_NAME]
    assert cookie.value == "en" and int(cookie["max-age"]) == 365 * 24 * 3600
    page = content_manager.get(home, HTTP_ACCEPT_LANGUAGE=CHINESE_BROWSER).content.decode()
    assert "Timeline" in page and "时间线" not in page
    assert 'id="language-zh-hans"' in page
    content_manager.post("/i18n/setlang/", {"language": "zh-hans", "next": home})
    page = content_manager.get(home).content.decode()  # a browser asking for nothing
    assert "时间线" in page


def test_the_apis_answer_in_english_whatever_the_client_asks(api_key: str) -> None:
    """Machines read the API's messages: a Chinese Accept-Language changes nothing, not even
    the messages of the libraries under it (DRF ships a Chinese catalogue of its own)."""
    client = Client()
    english = client.get("/api/v1/kbs/")
    chinese = client.get("/api/v1/kbs/", HTTP_ACCEPT_LANGUAGE=CHINESE_BROWSER)
    assert english.status_code == chinese.status_code == 401
    assert chinese.json() == english.json()
    assert not re.search(r"[\u4e00-\u9fff]", chinese.content.decode())
    assert "Content-Language" not in chinese.headers
    assert "Accept-Language" not in chinese.headers.get("Vary", "")
    keyed = client.get(
        "/api/v1/kbs/nope/documents/",
        HTTP_AUTHORIZATION=f"Bearer {api_key}",
        HTTP_ACCEPT_LANGUAGE=CHINESE_BROWSER,
    )
    assert keyed.status_code == 404
    assert not re.search(r"[\u4e00-\u9fff]", keyed.content.decode())


def test_a_refusal_in_the_service_reads_in_the_admins_language(
    content_manager: Client, kb: KnowledgeBase
) -> None:
    """A message a shared service raises (here the restore of a document that is not deleted)
    reaches the admin in the person's language."""
    document = upload(kb, "travel", "Train tickets are reimbursed.").document
    ensure_roles(Group, Permission)
    user = User.objects.get(username="cm-language")
    user.user_permissions.add(Permission.objects.get(codename="restore_document"))
    page = content_manager.post(
        f"/admin/kb/document/{document.pk}/restore/",
        {"reason": "测试"},
        HTTP_ACCEPT_LANGUAGE=CHINESE_BROWSER,
        follow=True,
    ).content.decode()
    assert "该文档未被删除。" in page


def test_a_request_too_large_is_refused_in_the_browsers_language(content_manager: Client) -> None:
    """A body over what Canon reads is refused before a byte of it is read: the page says so in
    the language the browser or the switcher chose, the API in English."""
    declared: dict[str, Any] = {
        "data": b"x",
        "content_type": "application/octet-stream",
        "CONTENT_LENGTH": str(request_max_bytes() + 1),
    }
    upload_page = "/admin/kb/document/upload/"

    chinese = content_manager.post(upload_page, HTTP_ACCEPT_LANGUAGE=CHINESE_BROWSER, **declared)
    english = content_manager.post(upload_page, HTTP_ACCEPT_LANGUAGE="en-US,en;q=0.9", **declared)
    content_manager.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    chosen = content_manager.post(upload_page, HTTP_ACCEPT_LANGUAGE="en-US,en;q=0.9", **declared)
    api = content_manager.post("/api/v1/upload", HTTP_ACCEPT_LANGUAGE=CHINESE_BROWSER, **declared)

    assert chinese.status_code == english.status_code == chosen.status_code == 413
    limit = f"{request_max_bytes():,}"
    for page in (chinese, chosen):
        text = page.content.decode()
        assert '<html lang="zh-hans">' in text and "<h1>上传被拒绝</h1>" in text
        assert f"请求体超过了 Canon 读取的上限（{limit} 字节：" in text
        assert "Upload refused" not in text
    text = english.content.decode()
    assert "<h1>Upload refused</h1>" in text
    assert f"The request body is larger than Canon reads ({limit} bytes: " in text
    assert not re.search(r"[\u4e00-\u9fff]", text)
    assert api.status_code == 413 and api.json()["error"] == "request_too_large"
    assert api.json()["detail"].startswith("The request body is larger than Canon reads")
