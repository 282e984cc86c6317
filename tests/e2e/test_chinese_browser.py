"""A content manager's day in Simplified Chinese (issue 41, item 5), in a real headless Chromium
whose person reads Chinese, a real Celery worker building: she uploads files to a knowledge base
that needs approval, one fails; she retries a build a provider refused; an index admin approves;
she tries test search. Every page reads in Chinese, why a build failed too (`kb.failures`): what
is left in English is only what she or the files wrote (keys, file names, titles), names of
formats and APIs, and a provider's own answer inside its reason. The switcher in the header turns
the same page to English and back. An index admin reads a folder source's sync runs in Chinese:
one whose listing failed (the folder's own reason, inside why nothing was deleted) and one that
holds deletions for her (why they wait, on the run's page and its confirmation page, and her
answer after it).

Screenshots land in artifacts/e2e/ (look at them)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from embeddings.base import REFUSED
from ingestion.pipeline.run import task_execute
from kb.failures import failure_fields
from kb.metadata import BUILT_IN_FIELDS
from kb.models import Build, Document, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from sources.models import Source, SyncRun
from sources.services.runs import sync_request
from sources.services.sources import source_save
from tests.conftest import wait_for
from tests.e2e.browser import Person, chinese_browser, make_user
from tests.e2e.test_sources_browser import sources_settings
from tests.kb.test_swap_with_known_failures import BROKEN_PDF
from work.models import IngestionTask

__all__ = ["chinese_browser"]

pytestmark = pytest.mark.integration

SIGNED_IN = "最近动作"  # Django's own "Recent actions"
# Why the truncated PDF failed, in Chinese (textkit.extract.pdf.DAMAGED).
DAMAGED_PDF = "PDF 已损坏或被截断，无法读取。"
# Words that are not the admin's to translate: names of formats, standards and APIs, the
# site's name, the switcher's "English", the API's names shown beside their Chinese words
# (a filter operator's "gte", the search API's path) and the names of a JSON example (its
# filter language's "field", "value", "not").
NAMES = {
    "Canon", "English", "UTC", "PDF", "Markdown", "HTML", "Word", "Excel", "PowerPoint", "CSV",
    "EPUB", "OpenDocument", "RTF", "OCR", "JSON", "API", "BM25", "POST", "WebP", "JPEG", "PNG",
    "TIFF", "docx", "pptx", "xlsx", "odt", "ods", "odp", "rtf", "tsv", "csv", "eml", "msg",
    "api", "search", "filter", "YYYY", "gte", "lte", "nin", "contains", "starts", "ends", "with",
    "exists", "hash", "canon", "cosine", "Git", "department", "year", "draft", "tags", "field",
    "value", "not", "HTTP",
}  # fmt: skip


def english_left(person: Person, data: list[str]) -> list[str]:
    """The English words on the page's own parts (header, breadcrumbs, the navigation
    sidebar, the main column), once `data` (what people and files wrote: keys, titles, names,
    stored errors) and NAMES are taken out."""
    # One script reads every part's rendered text at once: a page's progress script may
    # replace nodes between two reads of them one by one.
    text = str(
        person.driver.execute_script(
            "return [...document.querySelectorAll('#header, .breadcrumbs, #nav-sidebar, main')]"
            ".map(e => e.innerText).join('\\n');"
        )
    )
    for phrase in sorted(data, key=len, reverse=True):
        text = text.replace(phrase, " ")
    words = set(re.findall(r"[A-Za-z][A-Za-z\u2019']{2,}", text))
    return sorted(words - NAMES)


def test_a_content_managers_day_reads_in_chinese(
    live_server: Any,
    chinese_browser: WebDriver,
    worker_factory: Callable[..., Any],
    approval_kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    browser = chinese_browser
    kb = approval_kb
    kb.name = "员工手册"
    kb.save()
    worker_factory()
    ensure_roles(Group, Permission)
    make_user("cm-zh", CONTENT_MANAGERS, kb.tenant)
    make_user("ia-zh", INDEX_ADMINS, kb.tenant)
    (tmp_path / "travel.md").write_text("# 差旅报销\n\n火车票按二等座报销，出差需提前审批。\n")
    (tmp_path / "leave.md").write_text("# 年假\n\n员工每年享有二十五天带薪年假。\n")
    (tmp_path / "scan.pdf").write_bytes(BROKEN_PDF)  # a truncated PDF
    data = [
        "cm-zh", "ia-zh", str(kb), kb.tenant.slug, kb.slug, "travel.md", "leave.md", "scan.pdf",
        "travel", "leave", "scan", "canon-hash-v1", *BUILT_IN_FIELDS,
        "openai", "the input is too long",  # a provider's name and its own answer
    ]  # fmt: skip

    def reads_in_chinese(person: Person, shot: str) -> None:
        left = english_left(person, data)
        person.screenshot(shot)
        assert not left, f"English left on {person.driver.current_url}: {left}"

    # she signs in: the front page is in Chinese
    cm = Person(browser, live_server.url, "cm-zh")
    cm.log_in(signed_in=SIGNED_IN)
    assert browser.find_element(By.TAG_NAME, "html").get_attribute("lang") == "zh-hans"
    assert "员工手册" in cm.text() and "你的知识库" in cm.text()
    reads_in_chinese(cm, "front-page")

    # she uploads three files; the PDF is damaged
    cm.visit("/admin/kb/document/upload/")
    assert "支持的格式：" in cm.text()
    reads_in_chinese(cm, "upload-page")
    browser.find_element(By.ID, "id_files").send_keys(
        "\n".join(str(tmp_path / name) for name in ("travel.md", "leave.md", "scan.pdf"))
    )
    cm.submit("input[type=submit]")
    cm.wait_for_text("新文档 scan，来自 scan.pdf")
    reads_in_chinese(cm, "uploaded")

    # the home: two await approval, the PDF failed, with why in her language
    cm.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    cm.wait_for_text(DAMAGED_PDF, reload=True, timeout=120)
    assert "damaged" not in cm.text()
    wait_for(
        lambda: Build.objects.filter(kb=kb, state=Build.State.READY).count() == 2,
        timeout=120,
        what="travel and leave built, awaiting approval",
    )
    browser.refresh()
    stats = browser.find_element(By.ID, "kb-stats").text
    assert "等待审批" in stats and "失败" in stats
    reads_in_chinese(cm, "home-with-a-failure")

    # a provider refused leave's build for a while; she retries it from its page
    leave = Build.objects.get(kb=kb, document__key="leave")
    refused = REFUSED(provider="openai", status="400", answer="the input is too long")
    Build.objects.filter(pk=leave.pk).update(state=Build.State.FAILED, **failure_fields(refused))
    IngestionTask.objects.filter(build=leave).update(status=IngestionTask.Status.FAILED)
    cm.visit(f"/admin/kb/document/{leave.document_id}/change/")
    cm.wait_for_text("重试…")
    builds = browser.find_element(By.ID, "builds").text
    assert "openai 拒绝了请求：HTTP 400：the input is too long" in builds
    reads_in_chinese(cm, "document-page-failed")
    browser.find_element(By.CSS_SELECTOR, f"#build-{leave.pk} .retry-link").click()
    cm.wait_for_text("从头重新构建")
    assert "重试 年假 的修订版本 1 的构建" in cm.text()  # the title the file gave
    reads_in_chinese(cm, "retry-confirmation")
    cm.fill("id_reason", "提供方已恢复")
    cm.submit("#confirm-button")
    cm.wait_for_text("修订版本 1 的构建已重新排队。")
    wait_for(
        lambda: Build.objects.get(pk=leave.pk).state == Build.State.READY,
        timeout=120,
        what="leave built again",
    )
    cm.visit(f"/admin/kb/document/{leave.document_id}/change/")
    cm.wait_for_text("等待审批", reload=True)
    history = browser.find_element(By.ID, "history").text
    assert "重试" in history and "提供方已恢复" in history
    reads_in_chinese(cm, "document-page-retried")

    # the document list: the work queues, counted
    cm.visit(f"/admin/kb/document/?kb__id__exact={kb.pk}")
    queues = browser.find_element(By.ID, "work-queues").text
    assert "待办队列" in queues and "等待审批 (2)" in queues
    reads_in_chinese(cm, "document-list")

    # an index admin approves travel, then leave, each on its confirmation page
    ia = Person(browser, live_server.url, "ia-zh")
    ia.log_in(signed_in=SIGNED_IN)
    titles = {"travel": "差旅报销", "leave": "年假"}
    for key in ("travel", "leave"):
        build = Build.objects.get(kb=kb, document__key=key)
        ia.visit(f"/admin/kb/document/{build.document_id}/change/")
        browser.find_element(By.CSS_SELECTOR, f"#build-{build.pk} .approve-link").click()
        ia.wait_for_text("文本变化")
        assert f"审批 {titles[key]} 的修订版本 1" in ia.text()
        if key == "travel":
            reads_in_chinese(ia, "approve-confirmation")
        ia.fill("id_reason", "内容已核对")
        ia.submit("#confirm-button")
        ia.wait_for_text("修订版本 1 已上线。")
    reads_in_chinese(ia, "approved")

    # she tries test search in Chinese
    cm.log_in(signed_in=SIGNED_IN)
    cm.visit(f"/admin/kb/knowledgebase/{kb.pk}/search/")
    reads_in_chinese(cm, "test-search-form")
    cm.fill("id_query", "火车票")
    cm.submit("input[type=submit][value=搜索]")
    cm.wait_for_text("条结果")
    hits = browser.find_element(By.ID, "results").text
    assert "差旅报销" in hits and "排名原因" in hits
    data.extend(["差旅报销", "年假"])
    reads_in_chinese(cm, "test-search-results")

    # the timeline says the day in Chinese
    cm.visit(f"/admin/kb/knowledgebase/{kb.pk}/timeline/")
    timeline = browser.find_element(By.ID, "kb-timeline").text
    assert "已审批" in timeline and "重试了构建" in timeline and "已上传" in timeline
    assert re.search(r"\d{4}年\d{1,2}月\d{1,2}日 \d{2}:\d{2}:\d{2} UTC", timeline)
    reads_in_chinese(cm, "timeline")

    # the evaluation pages too: the question sets, the knowledge base's quality
    cm.visit("/admin/evaluation/questionset/")
    reads_in_chinese(cm, "question-sets")
    cm.visit(f"/admin/evaluation/evaluationrun/quality/{kb.pk}/")
    assert "质量" in cm.text()
    reads_in_chinese(cm, "quality")

    # the switcher turns the same page to English, and back
    cm.visit(f"/admin/kb/knowledgebase/{kb.pk}/timeline/")
    cm.submit("#language-en")
    cm.wait_for_text("Timeline of")
    assert browser.find_element(By.TAG_NAME, "html").get_attribute("lang") == "en"
    cm.screenshot("timeline-in-english")
    cm.submit("#language-zh-hans")
    cm.wait_for_text("的时间线")
    assert Document.objects.filter(kb=kb).count() == 3


def test_an_index_admin_reads_a_sync_runs_deletions_in_chinese(
    live_server: Any, chinese_browser: WebDriver, kb: KnowledgeBase, tmp_path: Path, settings: Any
) -> None:
    browser = chinese_browser
    sources_settings(tmp_path)
    settings.SOURCES_DELETE_HOLD_MIN = 2
    ensure_roles(Group, Permission)
    make_user("ia-zh", INDEX_ADMINS, kb.tenant)
    share, away = tmp_path / "share", tmp_path / "away"
    share.mkdir()
    names = [f"page-{number}.md" for number in range(6)]
    for name in names:
        (share / name).write_text(f"# 第 {name[5]} 页\n\n制度正文。\n")
    source = source_save(
        kb=kb, name="制度共享盘", slug="policies", kind="folder", config={"path": str(share)}
    )

    def synced(source: Source) -> SyncRun:  # in this process, as a worker runs it
        run, _ = sync_request(source=source)
        assert run.task_id is not None
        task_execute(task_id=run.task_id, worker_id="e2e")
        run.refresh_from_db()
        return run

    assert synced(source).new == 6
    share.rename(away)  # the share is unmounted: the listing fails, nothing is deleted
    failed = synced(source)
    away.rename(share)
    for name in names[:3]:  # back, three pages retired: half the source, over its threshold
        (share / name).unlink()
    held = synced(source)
    assert failed.state == SyncRun.State.FAILED, failed.deletion_note
    assert held.state == SyncRun.State.AWAITING_CONFIRMATION, held.deletion_note
    # the folder's own words, with the system's words for what went wrong inside
    folder_zh = f"无法读取文件夹 {share}：no such file or directory。"
    data = [
        "ia-zh", str(kb), kb.tenant.slug, str(share), "no such file or directory", *names,
        "policies", "page",
    ]  # fmt: skip
    english = ("Nothing was deleted", "The folder", "listing", "Deletions wait", "Kept:")

    def reads_in_chinese(person: Person, shot: str) -> None:
        left = english_left(person, data)
        person.screenshot(shot)
        assert not left, f"English left on {person.driver.current_url}: {left}"
        assert not [words for words in english if words in person.text()]

    ia = Person(browser, live_server.url, "ia-zh")
    ia.log_in(signed_in=SIGNED_IN)

    # the failed run: why the listing failed, and why nothing was deleted, in Chinese
    ia.visit(f"/admin/sources/syncrun/{failed.pk}/change/")
    ia.wait_for_text("删除")
    assert browser.find_element(By.ID, "run-error").text == f"列举数据源失败：{folder_zh}"
    note = browser.find_element(By.ID, "deletion-note").text
    assert note == f"没有删除任何内容（6 个条目未被列举到）：列举不完整：{folder_zh}"
    browser.execute_script("document.getElementById('run-deletions').scrollIntoView()")
    reads_in_chinese(ia, "sync-run-listing-failed")

    # the run that holds deletions: why they wait, on its page and its confirmation page
    held_zh = "删除等待确认：将删除 6 个文档中的 3 个（50%），超过数据源的删除阈值 20%。"
    ia.visit(f"/admin/sources/syncrun/{held.pk}/change/")
    assert browser.find_element(By.ID, "deletion-note").text == held_zh
    assert "3 个文档等待人工确认删除" in browser.find_element(By.ID, "pending-deletions").text
    browser.execute_script("document.getElementById('run-deletions').scrollIntoView()")
    reads_in_chinese(ia, "sync-run-holds-deletions")
    ia.click("#keep-documents-link")
    ia.wait_for_text("等待原因")
    assert held_zh in ia.text()
    reads_in_chinese(ia, "sync-run-keep-confirmation")
    ia.fill("id_reason", "共享盘迁移中")
    ia.submit("input[type=submit]")
    ia.wait_for_text("已保留")
    note = browser.find_element(By.ID, "deletion-note").text
    assert note == f"{held_zh}已保留：有人选择不删除这 3 个文档。"
    assert browser.find_element(By.ID, "answered").text.startswith("由 ia-zh 于 ")
    assert "保留：3 个文档已保留，照常提供。" in browser.find_element(By.ID, "answered").text
    browser.execute_script("document.getElementById('run-deletions').scrollIntoView()")
    data.append("共享盘迁移中")
    reads_in_chinese(ia, "sync-run-kept")
