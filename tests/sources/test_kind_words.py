"""What a source's kind said, in the page's language (issue 41, item 5): every message a kind
(folder, S3 bucket, Git repository, website), the addresses it may reach, its credentials'
key and the sources service give is a declared reason; a run keeps it beside its English
(`SyncRun.error_params`, a problem's `code` and `params`), inside the run's own reason when the
listing failed, and the run's page words both in the person's language. The API answers the
English, and a run from before shows its English as stored."""

from __future__ import annotations

import html
import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import translation

import sources
from kb.failures import reason_words
from kb.models import KnowledgeBase
from retrieval.principals import api_key_create
from sources.models import Source, SyncRun
from sources.services.sources import source_save
from tests.s3server import ACCESS_KEY, SECRET_KEY
from tests.sources.kinds.test_git import Origin
from tests.sources.people import index_admin
from tests.sources.site_server import Route, SiteServer, links
from tests.sources.test_sync_run_words import CHINESE, ENGLISH, HAN, page, sync
from textkit.reasons import Words, english

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ian(kb: KnowledgeBase) -> Client:
    return index_admin(kb.tenant)


def kind_reasons() -> Iterator[Words]:
    """Every reason declared in the sources package: its kinds', its network's, its
    credentials', its patterns' and its services' (S3's by call, in tables)."""
    for module_info in pkgutil.walk_packages(sources.__path__, "sources."):
        if ".migrations" in module_info.name or ".api" in module_info.name:
            continue
        module = importlib.import_module(module_info.name)
        for value in vars(module).values():
            if isinstance(value, Words):
                yield value
            elif isinstance(value, Mapping):
                yield from (item for item in value.values() if isinstance(item, Words))


def chinese_and_english(run: SyncRun, client: Client) -> tuple[str, str]:
    return page(client, run, CHINESE), page(client, run, ENGLISH)


def test_every_reason_a_kind_can_give_reads_in_chinese() -> None:
    """A reason added without Chinese words would show English on a Chinese page; its English
    comes back unchanged on an English one."""
    declared = {words.code: words for words in kind_reasons()}
    untranslated = []
    for code, words in declared.items():
        values = {
            name: "folder" if name in words.words else "x"
            for name in re.findall(r"%\((\w+)\)s", words.english)
        }
        with translation.override("zh-hans"):
            chinese = reason_words(code, values, fallback="")
        with translation.override("en"):
            assert reason_words(code, values, fallback="") == english(code, values)
        # (a few are only their values joined, "%(path)s: %(detail)s": Chinese punctuation)
        if chinese == english(code, values):
            untranslated.append(code)
    kinds = {code.split(".")[0] for code in declared}
    assert {"folder", "s3", "git", "website", "source"} <= kinds
    assert len(declared) > 120
    assert untranslated == []


def test_a_folder_that_cannot_be_read_reads_in_the_readers_language(
    folder_source: Callable[..., Source], ian: Client
) -> None:
    source = folder_source()
    root = Path(source.config["path"])
    root.rmdir()  # the share is unmounted

    run = sync(source)

    english_words = (
        f"The listing failed: The folder {root} cannot be read: no such file or directory."
    )
    assert (run.error, run.error_reason) == (english_words, "sync.listing_failed")
    assert run.error_params == {
        "detail": {
            "code": "folder.unreadable",
            "params": {"path": str(root), "why": "no such file or directory"},
        }
    }
    chinese, english_page = chinese_and_english(run, ian)
    assert f"列举数据源失败：无法读取文件夹 {root}：no such file or directory。" in chinese
    assert "cannot be read" not in chinese
    assert english_words in english_page and "列举数据源失败" not in english_page


def test_a_folders_skipped_files_read_in_the_readers_language(
    folder_source: Callable[..., Source], ian: Client, settings: Any
) -> None:
    settings.SOURCES_MAX_ITEM_BYTES = 10
    source = folder_source()
    root = Path(source.config["path"])
    (root / "big.txt").write_text("x" * 1200)
    (root / "small.txt").write_text("small")
    (root / "link.txt").symlink_to(root / "small.txt")

    run = sync(source)

    problems = {problem["path"]: problem for problem in run.problems}
    assert problems["big.txt"]["reason"] == "1,200 bytes, over the limit of 10 bytes"
    assert problems["big.txt"]["code"] == "source.listed_too_large"
    assert problems["link.txt"]["reason"] == "symbolic link, not followed"
    chinese, english_page = chinese_and_english(run, ian)
    assert "1,200 字节，超过了 10 字节的上限" in chinese and "符号链接，未跟随" in chinese
    assert "over the limit" not in chinese and "not followed" not in chinese
    assert "1,200 bytes, over the limit of 10 bytes" in english_page
    assert "symbolic link, not followed" in english_page


def test_a_missing_bucket_reads_in_the_readers_language_and_the_api_in_english(
    kb: KnowledgeBase, s3_server: Any, ian: Client
) -> None:
    source = source_save(
        kb=kb,
        name="Bucket",
        slug="bucket",
        kind="s3",
        config={"endpoint_url": s3_server.endpoint, "bucket": "canon-no-such-bucket"},
        credentials={"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
    )

    run = sync(source)

    where = s3_server.endpoint
    english_words = (
        f"The listing failed: The bucket canon-no-such-bucket does not exist at {where} "
        "(NoSuchBucket)."
    )
    assert run.error == english_words
    assert run.error_params["detail"]["code"] == "s3.no_such_bucket"
    chinese, english_page = chinese_and_english(run, ian)
    assert (
        f"列举数据源失败：{where} 上不存在存储桶 canon-no-such-bucket（NoSuchBucket）。" in chinese
    )
    assert english_words in english_page and "存储桶" not in english_page
    _, key = api_key_create(tenant=kb.tenant, name="sources", can_manage_sources=True)
    api = Client(headers={"Authorization": f"Bearer {key}", **CHINESE})
    answer = api.get(f"/api/v1/sources/{source.pk}/runs/{run.pk}")
    assert answer.status_code == 200
    assert answer.json()["error"] == english_words
    assert not HAN.search(answer.content.decode())


def test_a_refused_website_address_reads_in_the_readers_language(
    kb: KnowledgeBase, ian: Client, settings: Any
) -> None:
    source = source_save(
        kb=kb,
        name="Site",
        slug="site",
        kind="website",
        config={"start_url": "http://127.0.0.1:9/"},
    )
    settings.SOURCES_ALLOW_PRIVATE = False  # as in production: loopback is out of reach

    run = sync(source)

    assert run.error == (
        "The listing failed: The host 127.0.0.1 is a loopback, link-local or private address "
        "(127.0.0.1); sources may not reach those unless CANON_SOURCES_ALLOW_PRIVATE is set."
    )
    chinese, english_page = chinese_and_english(run, ian)
    assert (
        "列举数据源失败：主机 127.0.0.1 是环回、链路本地或私有地址（127.0.0.1）；除非设置了 "
        "CANON_SOURCES_ALLOW_PRIVATE，否则数据源不能访问这类地址。"
    ) in chinese
    assert run.error in english_page


@pytest.fixture
def site() -> Iterator[SiteServer]:
    """A page linking one that fails (500) and one that redirects off the site."""
    server = SiteServer()
    server.page("/", f"<!doctype html><body>{links('/broken.html', '/away', '/fine.html')}")
    server.page("/fine.html", "<!doctype html><body><p>fine</p>")
    server.page("/broken.html", "oops", status=500)
    server.routes["/away"] = Route(
        status=302, headers={"Location": f"http://localhost:{server.port}/fine.html"}
    )
    yield server
    server.stop()


def test_a_websites_unread_pages_read_in_the_readers_language(
    kb: KnowledgeBase, site: SiteServer, ian: Client
) -> None:
    source = source_save(
        kb=kb,
        name="Site",
        slug="site",
        kind="website",
        config={"start_url": site.url + "/", "delay_seconds": "0"},
    )

    run = sync(source)

    problems = {problem["path"]: problem["reason"] for problem in run.problems}
    assert problems["broken.html"] == "the site answered 500 Internal Server Error"
    assert problems["away"] == f"redirected off the site to localhost:{site.port}"
    chinese, english_page = chinese_and_english(run, ian)
    assert "网站的应答是 500 Internal Server Error" in chinese
    assert f"被重定向到站点之外：localhost:{site.port}" in chinese
    assert "the site answered" not in chinese and "redirected off the site" not in chinese
    assert problems["broken.html"] in english_page and problems["away"] in english_page


def test_a_missing_git_branch_reads_in_the_readers_language(
    kb: KnowledgeBase, tmp_path: Path, ian: Client
) -> None:
    origin = Origin(tmp_path / "origin")
    origin.write("guide.md", "# Guide\n")
    origin.commit()
    origin.close()
    source = source_save(
        kb=kb,
        name="Repo",
        slug="repo",
        kind="git",
        config={"url": str(origin.root), "branch": "develop"},
    )

    run = sync(source)

    english_words = (
        "The listing failed: The repository has no branch 'develop' (its branches: main)."
    )
    assert run.error == english_words
    chinese, english_page = chinese_and_english(run, ian)
    assert "列举数据源失败：仓库中没有分支 'develop'（它的分支：main）。" in chinese
    assert english_words in english_page


def test_a_reason_inside_a_reason_nobody_declares_now_shows_the_stored_english(
    folder_source: Callable[..., Source], ian: Client
) -> None:
    run = sync(folder_source())
    SyncRun.objects.filter(pk=run.pk).update(
        state=SyncRun.State.FAILED,
        error="The listing failed: an old kind's words",
        error_reason="sync.listing_failed",
        error_params={"detail": {"code": "folder.no_longer_declared", "params": {}}},
    )

    assert "The listing failed: an old kind's words" in page(ian, run, CHINESE)


def test_the_source_form_words_a_kinds_refusal_in_the_readers_language(
    kb: KnowledgeBase, ian: Client
) -> None:
    form = {
        "kb": str(kb.pk),
        "kind": "folder",
        "name": "Share",
        "slug": "share",
        "enabled": "on",
        "config__folder__path": "relative/share",
        "delete_threshold_percent": "20",
    }

    chinese = ian.post("/admin/sources/source/add/", form, headers=CHINESE)
    english_page = ian.post("/admin/sources/source/add/", form, headers=ENGLISH)

    assert chinese.status_code == english_page.status_code == 200
    assert "文件夹 'relative/share' 不是绝对路径。" in html.unescape(chinese.content.decode())
    assert "The folder 'relative/share' is not an absolute path." in html.unescape(
        english_page.content.decode()
    )
    assert not Source.objects.exists()
