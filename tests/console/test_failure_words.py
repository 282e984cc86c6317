"""Why a build failed, in the page's language (issue 41, item 5): the pipeline stores a declared
reason's code and values beside its English sentence (`kb.failures`); the admin's pages word it
in the person's language (Simplified Chinese here), the API keeps the English (machines read
it), and a build from before codes were kept shows its English as stored."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse
from django.utils import translation

from kb.failures import reason_words
from kb.models import Build, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.selectors.index_versions import index_version_coverage, index_version_progress
from kb.services.documents import build_retry
from tests.console.admin_world import staff
from tests.helpers import run_pending
from tests.kb.test_swap_with_known_failures import fail_build, new_version, upload_broken
from textkit.extract import ocr, pdf, rows
from textkit.reasons import DECLARED, english

pytestmark = pytest.mark.django_db(transaction=True)

CHINESE = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8"}
ENGLISH = {"Accept-Language": "en-US,en;q=0.9"}
DAMAGED_EN = "The PDF is damaged or truncated and cannot be read."
DAMAGED_ZH = "PDF 已损坏或被截断，无法读取。"
HAN = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture
def clients(kb: KnowledgeBase) -> tuple[Client, Client]:
    """A content manager and an index admin of the knowledge base's tenant."""
    ensure_roles(Group, Permission)
    carol, ian = Client(), Client()
    carol.force_login(staff("carol", CONTENT_MANAGERS, kb.tenant))
    ian.force_login(staff("ian", INDEX_ADMINS, kb.tenant))
    return carol, ian


@pytest.fixture
def failed(kb: KnowledgeBase) -> Build:
    """`scan` r1, a truncated PDF, failed to build in the active version."""
    upload_broken(kb, "scan")
    run_pending()
    return Build.objects.get(document__key="scan", index_version_id=kb.active_index_version_id)


def text(response: Any) -> str:
    assert response.status_code == 200, response
    return re.sub(r"\s+", " ", response.content.decode())


def test_the_pipeline_keeps_the_reason_as_a_code_beside_the_english(failed: Build) -> None:
    assert failed.state == Build.State.FAILED
    assert failed.error == DAMAGED_EN
    assert (failed.error_code, failed.error_params) == ("pdf.damaged", {})


def test_a_failed_build_reads_in_chinese_for_a_chinese_reader_and_in_english_otherwise(
    clients: tuple[Client, Client], kb: KnowledgeBase, failed: Build
) -> None:
    carol, _ = clients
    page = f"/admin/kb/document/{failed.document_id}/change/"
    progress = reverse("admin:kb_document_progress", args=[failed.document_id])
    home = f"/admin/kb/knowledgebase/{kb.pk}/home/"

    chinese = text(carol.get(page, headers=CHINESE))
    english_page = text(carol.get(page, headers=ENGLISH))

    # the status line and the Builds box's error column
    assert chinese.count(DAMAGED_ZH) == 2, chinese
    assert DAMAGED_EN not in chinese
    assert english_page.count(DAMAGED_EN) == 2 and DAMAGED_ZH not in english_page
    # the page's script refreshes the error from the progress JSON: in the same language
    builds = carol.get(progress, headers=CHINESE).json()["builds"]
    assert [b["error"] for b in builds] == [DAMAGED_ZH]
    assert [b["error"] for b in carol.get(progress, headers=ENGLISH).json()["builds"]] == [
        DAMAGED_EN
    ]
    # the knowledge base's home names the failure
    assert DAMAGED_ZH in text(carol.get(home, headers=CHINESE))
    assert DAMAGED_EN in text(carol.get(home, headers=ENGLISH))


def test_every_admin_page_naming_the_failure_words_it_in_chinese(
    clients: tuple[Client, Client], failed: Build
) -> None:
    carol, ian = clients
    pages = {
        "the build's page": (carol, f"/admin/kb/build/{failed.pk}/change/"),
        "the build's chunks": (carol, reverse("admin:kb_build_chunks", args=[failed.pk])),
        "retry's confirmation": (
            carol,
            reverse("admin:kb_document_retry", args=[failed.document_id, failed.pk]),
        ),
        "the dashboard's failed tasks": (ian, "/admin/ingestion/ingestiontask/dashboard/"),
    }
    for name, (client, url) in pages.items():
        page = text(client.get(url, headers=CHINESE))
        assert DAMAGED_ZH in page, name
        assert DAMAGED_EN not in page, name


def test_a_swaps_coverage_words_the_failure_it_tolerates(kb: KnowledgeBase, failed: Build) -> None:
    """The settings, swap and rollback pages read a candidate's coverage in one statement: the
    failure of a file no version can read comes with its reason in the reader's language."""
    candidate = new_version(kb)
    run_pending()

    with translation.override("zh-hans"):
        coverage = index_version_coverage(version=candidate, kb=kb)
        progress = index_version_progress(version=candidate)
    with translation.override("en"):
        english_coverage = index_version_coverage(version=candidate, kb=kb)

    assert [(e.key, e.error) for e in coverage.tolerated] == [("scan", DAMAGED_ZH)]
    assert [e.error for e in english_coverage.tolerated] == [DAMAGED_EN]
    assert progress.failed == [f"scan r1: {DAMAGED_ZH}"]


def test_the_api_keeps_the_english_whatever_the_client_asks(api_key: str, failed: Build) -> None:
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_key}")

    body = client.get(f"/api/v1/documents/{failed.document_id}", headers=CHINESE).json()

    assert body["status"] == f"not live · r1 failed: {DAMAGED_EN}"
    assert not HAN.search(str(body))


def test_a_build_failed_before_codes_were_kept_shows_its_stored_words(
    clients: tuple[Client, Client], failed: Build
) -> None:
    carol, _ = clients
    fail_build(failed, "the provider refused the input")  # no code, as rows from before
    Build.objects.filter(pk=failed.pk).update(error_code="", error_params={})

    page = text(carol.get(f"/admin/kb/document/{failed.document_id}/change/", headers=CHINESE))

    assert "the provider refused the input" in page
    assert DAMAGED_ZH not in page


def test_a_reasons_values_are_worded_too_words_translated_and_numbers_grouped() -> None:
    too_many = rows.TOO_MANY_ROWS(what="workbook", limit=rows.MAX_ROWS)
    ocr_off = pdf.NO_TEXT_LAYER_OCR_OFF(off="OCR is off for this knowledge base")
    pixels = ocr.IMAGE_TOO_LARGE(width=12000, height=9000, limit=50_000_000)

    with translation.override("zh-hans"):
        assert reason_words(too_many.code, too_many.values, fallback="") == (
            "工作簿超过了 200,000 行的上限；请拆分成较小的文件。"
        )
        assert "而且此知识库已关闭 OCR，因此" in reason_words(
            ocr_off.code, ocr_off.values, fallback=""
        )
        assert reason_words(pixels.code, pixels.values, fallback="") == (
            "图片为 12,000 × 9,000 像素；OCR 的上限是 50,000,000 像素。"  # noqa: RUF001 (times)
        )
    with translation.override("en"):
        for reason in (too_many, ocr_off, pixels):
            assert reason_words(reason.code, reason.values, fallback="") == reason.english()
    assert too_many.english() == (
        "The workbook has more than the limit of 200,000 rows; split it into smaller files."
    )


def test_every_declared_reason_reads_in_chinese() -> None:
    """Each code the pipeline may store has Chinese words (a reason added without them would
    show English on a Chinese page), and its English comes back unchanged on an English one."""
    untranslated = []
    for code, declared in DECLARED.items():
        values = {
            name: "workbook" if name in declared.words else "x"  # a word the catalogue has
            for name in re.findall(r"%\((\w+)\)s", declared.english)
        }
        with translation.override("zh-hans"):
            chinese = reason_words(code, values, fallback="")
        with translation.override("en"):
            assert reason_words(code, values, fallback="") == english(code, values)
        # (a few are only their values joined, a source's "%(path)s: %(detail)s": Chinese
        # punctuation alone)
        if chinese == english(code, values):
            untranslated.append(code)
    assert len(DECLARED) > 80  # every format's, OCR's, the providers' and the pipeline's
    assert untranslated == []


def test_an_unknown_code_or_values_that_do_not_fit_show_the_stored_english() -> None:
    with translation.override("zh-hans"):
        assert reason_words("", {}, fallback="as stored") == "as stored"
        assert reason_words("no.such_reason", {}, fallback="as stored") == "as stored"
        assert reason_words("pdf.page_damaged", {}, fallback="as stored") == "as stored"
        assert reason_words("pdf.page_damaged", None, fallback="as stored") == "as stored"


def test_a_retried_build_keeps_no_stale_code(failed: Build) -> None:
    build_retry(build_id=failed.pk, actor=None, reason="try again")

    failed.refresh_from_db()
    assert (failed.state, failed.error, failed.error_code, failed.error_params) == (
        Build.State.PENDING,
        "",
        "",
        {},
    )
    run_pending()
    failed.refresh_from_db()
    assert (failed.state, failed.error_code) == (Build.State.FAILED, "pdf.damaged")
