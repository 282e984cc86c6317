"""The default mode keeps an English answer that only the keyword leg finds (issue 38).

A bilingual knowledge base, embedded by the packaged multilingual model (`use`): one English
page answers "which packages are on hold" with a terminal transcript (the words, little of the
meaning, so the vector leg ranks it below its first 30), among 65 pages in Chinese and English
that paraphrase the topic without its words (the vector leg's favourites). The learned model
alone, fitted on one corpus's questions, ranked such a keyword-only answer second, or out of
the top 10; the keyword gate (`retrieval.search.fusion.KeywordGate`) keeps a strong keyword
match at its keyword rank and a near-best one in the top 10, and `explain` says so.
"""

from __future__ import annotations

from typing import Any

import pytest

from embeddings import USE_DIMENSIONS, USE_MODEL
from kb.models import KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import Principal
from retrieval.search.engine import search
from retrieval.search.fusion import depth
from tests.helpers import run_pending, upload_text

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "apt-mark"
TRANSCRIPT = (
    "$ apt-mark showhold  # the packages on hold\n"
    "$ sudo apt-mark hold linux-image-amd64\n"
    "linux-image-amd64 set on hold.\n"
    "$ apt-mark showhold\n"
    "linux-image-amd64\n"
    "$ sudo apt full-upgrade\n"
    "The following packages have been kept back:\n"
    "  linux-image-amd64\n"
    "0 upgraded, 0 newly installed, 0 to remove and 1 not upgraded."
)
ENGLISH = (
    "Pause automatic updates for a single app in the software center so it stays as it is.",
    "Stop an application from auto-updating while the rest of the system still gets fixes.",
    "Disable updates for just one program and let everything else update normally.",
    "Freeze a program at the release you have installed so the updater ignores it.",
    "Tell the updater to ignore a particular application during the nightly update run.",
    "Prevent a single piece of software from moving to a newer release.",
    "Exclude an app from system updates without turning updates off entirely.",
    "Lock an installed application so that updating the computer does not touch it.",
)
CHINESE = (
    "如何让某一个软件在系统更新时不被更新，其他软件照常更新？",
    "暂停单个应用的自动更新，让它保持现在的样子。",
    "禁止某个程序自动升级到新版本。",
    "在更新系统时跳过指定的应用程序。",
    "冻结一个软件的版本，更新管理器不再替换它。",
    "让更新工具忽略某个应用，其余应用继续更新。",
    "锁定已安装的程序，系统更新不会改变它。",
    "阻止驱动程序被自动更新，其他更新照常安装。",
    "把某个应用从待更新列表中排除。",
    "不想让浏览器自动升级，但其他软件要更新，该怎么设置？",
    "让手机上的某个应用停止自动更新。",
    "更新整个系统时保留某个工具的旧版本不变。",
    "怎样固定软件包的版本，避免升级时被替换？",
    "升级系统时如何保留某个软件包的当前版本？",
    "如何防止某个软件包在升级时被自动更新？",
    "系统升级会不会替换我手动安装的软件？怎样避免？",
    "怎样让包管理器在升级时跳过一个软件包？",
    "我不希望内核在升级时被更新，应该怎么做？",
    "如何暂时冻结一个软件包，等以后再升级？",
    "软件包被保持后，升级时会显示什么提示？",
    "如何查看哪些软件包被设置为不升级？",
    "取消软件包的保持状态，让它重新参与升级。",
    "升级时提示有软件包被保留，这是什么意思？",
    "怎样避免显卡驱动在系统升级时被替换？",
    "如何只升级部分软件包，而保留其他软件包不变？",
    "在升级前锁定数据库软件的版本。",
    "服务器升级时怎样保证某个服务的软件版本不变？",
    "如何设置软件源的优先级来阻止某个软件包升级？",
    "不想升级某个库，因为新版本和我的程序不兼容。",
    "怎样让自动更新服务不要动某个软件？",
    "升级整个系统，但是某个软件保持原来的版本。",
    "软件中心里如何关闭某个应用的更新提醒？",
    "查看被锁定、不会升级的软件包列表。",
    "哪些软件包目前处于保持状态？",
    "显示所有被保留不升级的软件包。",
    "列出系统中被冻结版本的软件。",
    "我想知道哪些软件不会随系统一起升级。",
    "升级后有几个软件包没有更新，怎么找出是哪几个？",
    "检查有没有软件包被设置成保持。",
    "怎样确认某个软件包已经被锁定版本？",
    "被保留的软件包会一直不升级吗？",
    "软件包管理器里有没有命令可以列出锁定的软件？",
    "如何解除所有软件包的版本锁定？",
    "保持某个软件包的版本以后，还能手动升级它吗？",
    "升级系统时哪些软件包被跳过了？",
    "找出所有没有升级到最新版本的软件包。",
    "列出所有处于冻结状态的程序。",
    "如何批量锁定多个软件包的版本？",
    "锁定软件包版本后系统更新会报错吗？",
    "为什么有些软件包总是显示无法升级？",
    "如何让某个软件包永远保持在当前版本？",
    "升级提示某些软件包未升级，怎么处理？",
    "显示升级时被保留下来的软件。",
    "冻结内核版本以后如何查看状态？",
    "如何查看软件包的保持状态和原因？",
    "怎样知道哪些程序被管理员锁定了版本？",
    "检查系统里被暂停更新的软件有哪些。",
)


def held(tenant: Tenant, *, english_list: bool) -> KnowledgeBase:
    kb = knowledge_base_create(
        tenant=tenant,
        name="Held packages",
        slug="held-english" if english_list else "held",
        provider="use",
        model=USE_MODEL,
        dimensions=USE_DIMENSIONS,
        english_list=english_list,
    )
    # The keys are the titles, embedded with the text: the ranks below were read with these.
    upload_text(kb, ANSWER, TRANSCRIPT)
    for i, text in enumerate(ENGLISH):
        upload_text(kb, f"en-{i:02d}", text)
    for i, text in enumerate(CHINESE):
        upload_text(kb, f"zh-{i:02d}", text)
    assert set(run_pending()) == {"published"}
    return kb


@pytest.fixture
def held_packages(tenant: Tenant) -> KnowledgeBase:
    """The two legs alone (the gate is theirs): a version without the English list."""
    return held(tenant, english_list=False)


def keys_of(result: Any) -> list[str]:
    return [h.document_key for h in result.hits]


def keys(kb: KnowledgeBase, query: str, mode: str, top_k: int = 10) -> list[str]:
    return [h.document_key for h in ask(kb, query, mode, top_k).hits]


def ask(kb: KnowledgeBase, query: str, mode: str, top_k: int = 10, **extra: Any) -> Any:
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    return search(principal=principal, kb=kb, query=query, top_k=top_k, mode=mode, **extra)


def test_a_strong_english_answer_only_the_keyword_leg_finds_stays_first(
    held_packages: KnowledgeBase,
) -> None:
    query = "Which packages are on hold?"
    # given: the vector leg, read as deep as the hybrid reads it, does not list the answer;
    # the keyword leg puts it first
    assert ANSWER not in keys(held_packages, query, "vector", top_k=depth(10))
    assert keys(held_packages, query, "keyword")[0] == ANSWER
    # when the default mode answers, then the answer stays first, and explain says why
    result = ask(held_packages, query, "hybrid", explain=True)
    first = result.hits[0]
    assert first.document_key == ANSWER
    kept = result.ranking.hits[first.chunk_id]["fused"]["kept"]
    assert kept["keyword_rank"] == 1 and kept["at_rank"] is True
    assert kept["why"].startswith(
        "kept at rank 1 or better by the keyword gate: keyword rank 1, a strong keyword match ("
    )
    assert kept["why"].endswith("which the vector leg did not find")


def test_a_near_best_english_answer_only_the_keyword_leg_finds_stays_in_the_top_10(
    held_packages: KnowledgeBase,
) -> None:
    query = "How do I put a package on hold so upgrades skip it?"
    assert ANSWER not in keys(held_packages, query, "vector", top_k=depth(10))
    assert keys(held_packages, query, "keyword")[0] == ANSWER
    result = ask(held_packages, query, "hybrid", explain=True)
    found = [h for h in result.hits if h.document_key == ANSWER]
    assert found, "the keyword leg's first answer dropped out of the default's top 10"
    kept = result.ranking.hits[found[0].chunk_id]["fused"]["kept"]
    assert kept["at_rank"] is False
    assert kept["why"].startswith("kept in the top 10 by the keyword gate: keyword rank 1, 100% ")
    # the gate holds for queries not in Chinese: a Chinese question's keyword leg often
    # matches a page in the wrong language, and the model decides alone
    result = ask(held_packages, "哪些软件包目前处于保持状态？", "hybrid", explain=True)
    assert all("kept" not in why["fused"] for why in result.ranking.hits.values())


def test_with_the_english_list_the_answer_the_vector_leg_missed_is_found_by_meaning(
    tenant: Tenant,
) -> None:
    """The same pages on a version with the English list: the paraphrase the `use` leg misses
    is first in the English list, and the model ranks it in the top 3 without the gate's help
    (the two legs alone keep it in the top 10 only by the gate, above). The Chinese pages
    above it are about holding packages too, found by the `use` leg across languages."""
    kb = held(tenant, english_list=True)
    query = "How do I put a package on hold so upgrades skip it?"
    result = ask(kb, query, "hybrid", explain=True)
    keys = [h.document_key for h in result.hits]
    assert ANSWER in keys[:3], keys
    why = result.ranking.hits[result.hits[keys.index(ANSWER)].chunk_id]
    assert why["english"]["rank"] == 1 and why["vector"] is None
    assert "kept" not in why["fused"]
    # and the strong keyword match the vector leg misses stays first with three lists too
    assert keys_of(ask(kb, "Which packages are on hold?", "hybrid"))[0] == ANSWER
