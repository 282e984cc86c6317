"""Why an upload page refused a file, in the page's language (issue 41, item 5): a refusal
carries its declared reason (`kb.uploads.UploadRejected.reason`: an extractor's for the file's
type, the upload's own for its size, emptiness or the file store), which *Add* and *Upload
files* word in the person's language (Simplified Chinese here); the API answers the same
refusal in English whatever the client asks."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings
from django.utils import translation

from console.admin.upload_words import upload_refusal_words
from kb.failures import UPLOAD_STORE_UNAVAILABLE
from kb.models import Document, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, ensure_roles
from kb.uploads import UploadRejected
from tests.console.admin_world import staff
from tests.retrieval.factories import api
from textkit.extract.base import OLE_MAGIC

pytestmark = pytest.mark.django_db

CHINESE = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8"}
ENGLISH = {"Accept-Language": "en-US,en;q=0.9"}
HAN = re.compile(r"[\u4e00-\u9fff]")
INLINE = {"revisions-TOTAL_FORMS": "0", "revisions-INITIAL_FORMS": "0"}

EXE_EN = 'setup.exe: Files ending in ".exe" are not supported; upload one of these kinds: PDF, '
EXE_ZH = "setup.exe：不支持扩展名为“.exe”的文件；请上传以下格式之一：PDF、Word（.docx）、"
PROTECTED_EN = (
    "secret.docx: The file is an old-style Word (.doc) file or a password-protected document"
)
PROTECTED_ZH = "secret.docx：文件是旧式 Word（.doc）文件或受密码保护的文档"
# the list of kinds ends as each language lists
KINDS_END_EN = "OpenDocument spreadsheet (.ods) or OpenDocument presentation (.odp)."
KINDS_END_ZH = "OpenDocument 电子表格（.ods）或OpenDocument 演示文稿（.odp）。"


@pytest.fixture
def carol(kb: KnowledgeBase) -> Client:
    ensure_roles(Group, Permission)
    client = Client()
    client.force_login(staff("carol", CONTENT_MANAGERS, kb.tenant))
    return client


def unescaped(response: Any) -> str:
    return html.unescape(re.sub(r"\s+", " ", response.content.decode()))


def add(client: Client, kb: KnowledgeBase, name: str, content: bytes, headers: Any) -> str:
    data = {"kb": kb.pk, "key": "new", "title": "New", "access_groups": "", **INLINE}
    data["file"] = SimpleUploadedFile(name, content)
    response = client.post("/admin/kb/document/add/", data, headers=headers)
    assert response.status_code == 200  # the form again, with the file's error
    return unescaped(response)


def upload_many(client: Client, kb: KnowledgeBase, files: list[Any], headers: Any) -> list[str]:
    response = client.post(
        "/admin/kb/document/upload/",
        {"kb": kb.pk, "access_groups": "", "files": files},
        headers=headers,
        follow=True,
    )
    return [str(m) for m in response.context["messages"]]


def test_add_words_an_unsupported_or_protected_file_in_the_readers_language(
    carol: Client, kb: KnowledgeBase
) -> None:
    for name, content, english, chinese in (
        ("setup.exe", b"MZ\x90\x00", EXE_EN, EXE_ZH),
        ("secret.docx", OLE_MAGIC + b"\x00" * 64, PROTECTED_EN, PROTECTED_ZH),
    ):
        zh_page = add(carol, kb, name, content, CHINESE)
        en_page = add(carol, kb, name, content, ENGLISH)

        assert chinese in zh_page, zh_page
        assert english not in zh_page
        assert english in en_page and chinese not in en_page
        if name == "setup.exe":
            assert EXE_ZH + "HTML、Markdown、纯文本" in zh_page
            assert KINDS_END_ZH in zh_page and KINDS_END_EN in en_page
    assert not Document.objects.exists()


def test_upload_files_words_each_refusal_in_the_readers_language(
    carol: Client, kb: KnowledgeBase
) -> None:
    def files() -> list[Any]:
        return [
            SimpleUploadedFile("setup.exe", b"MZ\x90\x00"),
            SimpleUploadedFile("secret.docx", OLE_MAGIC + b"\x00" * 64),
            SimpleUploadedFile("report.pdf", b"\x00\x01garbage"),
            SimpleUploadedFile("notes", b"plain"),
        ]

    chinese = upload_many(carol, kb, files(), CHINESE)
    english = upload_many(carol, kb, files(), ENGLISH)

    assert chinese[0].startswith(f"未上传：{EXE_ZH}"), chinese
    assert chinese[0].endswith(KINDS_END_ZH)
    assert chinese[1].startswith(f"未上传：{PROTECTED_ZH}")
    assert chinese[2] == "未上传：report.pdf：文件名像 PDF，但内容不是 PDF。"
    assert chinese[3].startswith(
        "未上传：notes：文件名没有扩展名，无法判断文件类型；请上传以下格式之一："
    )
    assert chinese[3].endswith(KINDS_END_ZH)
    assert english[0].startswith(f"Not uploaded: {EXE_EN}") and english[0].endswith(KINDS_END_EN)
    assert english[1].startswith(f"Not uploaded: {PROTECTED_EN}")
    assert english[2] == (
        "Not uploaded: report.pdf: The file is named like a PDF, but its content is not a PDF."
    )
    assert english[3].startswith("Not uploaded: notes: The file name has no extension")
    assert not any(HAN.search(m) for m in english)
    assert not Document.objects.exists()


@override_settings(UPLOAD_MAX_BYTES=1024 * 1024)
def test_too_large_and_empty_files_are_refused_in_the_readers_language(
    carol: Client, kb: KnowledgeBase
) -> None:
    big = b"x" * (1024 * 1024 + 1)

    chinese = upload_many(
        carol,
        kb,
        [SimpleUploadedFile("big.txt", big), SimpleUploadedFile("blank.txt", b"")],
        CHINESE,
    )
    english = upload_many(
        carol,
        kb,
        [SimpleUploadedFile("big.txt", big), SimpleUploadedFile("blank.txt", b"")],
        ENGLISH,
    )

    assert chinese == [
        "未上传：big.txt 超过了 1 MB 的上限，未被保存。",
        "未上传：blank.txt 是空文件。",
    ]
    assert english == [
        "Not uploaded: big.txt is larger than the limit of 1 MB and was not stored.",
        "Not uploaded: blank.txt is empty.",
    ]


def test_the_upload_refusals_own_reasons_read_in_chinese() -> None:
    with translation.override("zh-hans"):
        assert upload_refusal_words(UploadRejected(UPLOAD_STORE_UNAVAILABLE(), status=503)) == (
            "文件存储暂时无法使用，因此文件未保存，也没有任何更改。请一分钟后重试。"
        )
        # a refusal without a declared reason keeps its words
        assert upload_refusal_words(UploadRejected("something odd")) == "something odd"
    with translation.override("en"):
        refusal = UploadRejected(UPLOAD_STORE_UNAVAILABLE(), status=503)
        assert upload_refusal_words(refusal) == str(refusal) == UPLOAD_STORE_UNAVAILABLE.english


def test_the_api_refuses_the_same_files_in_english_whatever_the_client_asks(
    api_key: str, kb: KnowledgeBase
) -> None:
    client = api(api_key)
    for name, content, status, english in (
        ("setup.exe", b"MZ\x90\x00", 415, EXE_EN),
        ("secret.docx", OLE_MAGIC + b"\x00" * 64, 415, PROTECTED_EN),
        ("report.pdf", b"\x00\x01garbage", 415, "report.pdf: The file is named like a PDF"),
    ):
        response = client.post(
            "/api/v1/kbs/handbook/documents/",
            {"key": "k", "file": SimpleUploadedFile(name, content)},
            headers={**CHINESE, "Idempotency-Key": f"u-{name}"},
        )

        assert response.status_code == status, response.content
        assert english in str(response.json()["detail"]), response.json()
        assert not HAN.search(response.content.decode())
