"""Hybrid search with the English list (issue 38, item 3): for a version with one and a query not
in Chinese, the English model's nearest visible chunks are a third list the three lists' model
ranks with the two legs (`retrieval.search.english`, `fusion.english_model`); a Chinese query,
a two-leg calibration and the other fusion methods leave it aside; it keeps every rule of
visibility; `explain` places each hit in it and says what it gave."""

from __future__ import annotations

from typing import Any

import pytest

from kb.models import Document, IndexVersion, KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import Principal
from retrieval.search import fusion
from retrieval.search.engine import search
from retrieval.search.hits import Hit, Leg, SearchFilters
from retrieval.search.several import search_several
from tests.helpers import run_pending, upload_text

pytestmark = pytest.mark.django_db(transaction=True)

PAGES = {
    "hold": "apt-mark hold marks a package as held back, so it is not upgraded automatically.",
    "printers": "Printers are added through the CUPS web interface on port 631.",
    "timezone": "timedatectl set-timezone changes the system's time zone; no reboot is needed.",
    "sudo": "sudo runs one command as another user, by default the superuser, after a password.",
    "打印": "打印机通过 CUPS 的网页界面添加，端口是 631，添加以后就可以打印文件了。",
}
# Shares no word with its answer ("hold"): found by meaning, in English.
PARAPHRASE = "How can I stop a program from being updated with everything else?"


def reader(kb: KnowledgeBase, groups: frozenset[str] = frozenset()) -> Principal:
    return Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=groups)


def knowledge_base(tenant: Tenant, slug: str, *, english_list: bool) -> KnowledgeBase:
    """A knowledge base on `hash` (which knows no meaning: only the English list can find a
    paraphrase) with or without the English list, holding PAGES."""
    kb = knowledge_base_create(
        tenant=tenant,
        name=slug,
        slug=slug,
        provider="hash",
        model="canon-hash-v1",
        dimensions=384,
        english_list=english_list,
    )
    for key, text in PAGES.items():
        upload_text(kb, key, text)
    assert run_pending() == ["published"] * len(PAGES)
    return kb


@pytest.fixture
def english(tenant: Tenant) -> KnowledgeBase:
    return knowledge_base(tenant, "english", english_list=True)


def test_an_english_paraphrase_is_found_through_the_english_list(
    english: KnowledgeBase, tenant: Tenant
) -> None:
    result = search(principal=reader(english), kb=english, query=PARAPHRASE, explain=True)

    assert result.hits[0].document_key == "hold"
    assert result.ranking is not None and result.ranking.method == "learned"
    why = result.ranking.hits[result.hits[0].chunk_id]
    assert why["english"]["rank"] == 1
    features = {c["feature"] for c in why["fused"]["contributions"]}
    assert set(fusion.ENGLISH_FEATURES) <= features
    # the same pages without the list: the two legs (a hash model, a keyword leg that shares no
    # word with the question) do not put the answer first
    plain = knowledge_base(tenant, "plain", english_list=False)
    two = search(principal=reader(plain), kb=plain, query=PARAPHRASE, explain=True)
    assert two.hits[0].document_key != "hold"
    assert two.ranking is not None
    assert all("english" not in hit for hit in two.ranking.hits.values())


def test_a_chinese_query_and_the_fixed_weight_fusions_leave_the_list_aside(
    english: KnowledgeBase,
) -> None:
    chinese = search(principal=reader(english), kb=english, query="怎么添加打印机", explain=True)
    assert chinese.hits[0].document_key == "打印"
    assert chinese.ranking is not None
    assert all("english" not in hit for hit in chinese.ranking.hits.values())
    contributions = next(iter(chinese.ranking.hits.values()))["fused"]["contributions"]
    assert len(contributions) == len(fusion.FEATURES)  # the two legs' model

    convex = search(
        principal=reader(english), kb=english, query=PARAPHRASE, explain=True, fusion="convex"
    )
    assert convex.ranking is not None
    assert all("english" not in hit for hit in convex.ranking.hits.values())


def test_an_identifier_the_keyword_leg_finds_stays_first(english: KnowledgeBase) -> None:
    result = search(principal=reader(english), kb=english, query="timedatectl set-timezone")
    assert result.hits[0].document_key == "timezone"


def test_the_english_list_keeps_every_rule_of_visibility(english: KnowledgeBase) -> None:
    Document.objects.filter(kb=english, key="hold").update(access_groups=["ops"])

    outsider = search(principal=reader(english), kb=english, query=PARAPHRASE, explain=True)
    assert "hold" not in {hit.document_key for hit in outsider.hits}
    assert outsider.ranking is not None
    hold_chunks = {h.chunk_id for h in outsider.hits if h.document_key == "hold"}
    assert not hold_chunks & set(outsider.ranking.hits)

    member = search(principal=reader(english, frozenset({"ops"})), kb=english, query=PARAPHRASE)
    assert member.hits[0].document_key == "hold"

    # a client filter narrows the list too
    narrowed = search(
        principal=reader(english, frozenset({"ops"})),
        kb=english,
        query=PARAPHRASE,
        filters=SearchFilters(document_keys=("sudo", "printers")),
    )
    assert {hit.document_key for hit in narrowed.hits} <= {"sudo", "printers"}


def test_several_knowledge_bases_each_rank_by_their_own_lists(
    english: KnowledgeBase, tenant: Tenant
) -> None:
    plain = knowledge_base(tenant, "plain", english_list=False)
    result = search_several(
        principal=reader(english), kbs=[english, plain], query=PARAPHRASE, top_k=3
    )
    first = result.hits[0]
    assert (first.kb, first.document_key) == ("english", "hold")


def _hit(chunk_id: int, score: float, document: str) -> Hit:
    return Hit(chunk_id, score, "plain English text", 0, document, "", 1, 1)


def test_a_model_of_the_two_legs_reads_no_english_list() -> None:
    vector = [_hit(1, 0.5, "a"), _hit(2, 0.4, "b")]
    keyword = [_hit(2, 3.0, "b")]
    english = Leg([_hit(3, 0.9, "c"), _hit(1, 0.2, "a")], 1.0)
    two = fusion.model()
    without = fusion.learned_ranking(
        vector, keyword, top_k=3, query="q", keyword_bound=5.0, parameters=two
    )
    beside = fusion.learned_ranking(
        vector, keyword, top_k=3, query="q", keyword_bound=5.0, parameters=two, english=english
    )
    assert beside.order == without.order and 3 not in beside.scores
    # the three lists' model reads it: its candidate is ranked
    three = fusion.learned_ranking(
        vector, keyword, top_k=3, query="q", keyword_bound=5.0, english=english
    )
    assert 3 in three.order
    assert fusion.english_model().english and not two.english


def test_a_calibration_of_three_lists_ranks_only_what_reads_the_list() -> None:
    """A question in Chinese reads no English list: with a calibration of the three lists it is
    ranked by the two legs' default, as without one (its calibration measured it so)."""
    calibrated = fusion.english_model()
    assert fusion.model_for(calibrated, None) == (fusion.model(), None)
    english = Leg([_hit(3, 0.9, "c")], 1.0)
    assert fusion.model_for(calibrated, english) == (calibrated, english)
    assert fusion.model_for(None, english) == (fusion.english_model(), english)
    two = fusion.model()
    assert fusion.model_for(two, english) == (two, None)


def test_the_other_legs_are_read_while_the_english_vector_is_embedded(
    english: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The English vector is embedded on a thread of its own: the keyword leg's statement runs
    before the model has answered, and the list is read once it has."""
    import threading

    from retrieval.search import engine
    from retrieval.search import english as english_module

    keyword_read = threading.Event()
    threads: list[str] = []
    embed = english_module._embedded
    read_keyword = engine.keyword_rows

    def slow_embed(version: IndexVersion, query: str) -> list[float]:
        threads.append(threading.current_thread().name)
        # a model slower than the legs: it answers only once the keyword leg has been read
        assert keyword_read.wait(timeout=30), "the search waited for the English vector"
        return embed(version, query)

    def keyword_rows(*args: Any, **kwargs: Any) -> Any:
        rows = read_keyword(*args, **kwargs)
        keyword_read.set()
        return rows

    monkeypatch.setattr(english_module, "_embedded", slow_embed)
    monkeypatch.setattr(engine, "keyword_rows", keyword_rows)

    result = search(principal=reader(english), kb=english, query=PARAPHRASE, explain=True)

    assert threads and threads[0].startswith("canon-english-query")
    assert threads[0] != threading.current_thread().name
    assert result.hits[0].document_key == "hold"
    assert result.ranking is not None
    assert result.ranking.hits[result.hits[0].chunk_id]["english"]["rank"] == 1


def test_a_model_that_fails_on_its_thread_fails_the_search_as_it_would_inline(
    english: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from embeddings import ProviderUnavailable
    from retrieval.search import english as english_module

    def broken(version: IndexVersion, query: str) -> list[float]:
        raise ProviderUnavailable("the English model could not be loaded")

    monkeypatch.setattr(english_module, "_embedded", broken)
    with pytest.raises(ProviderUnavailable, match="could not be loaded"):
        search(principal=reader(english), kb=english, query=PARAPHRASE)
    # a query the list is not read for never starts the model
    version = english.active_index_version
    assert version is not None
    assert english_module.english_query_started(version, "打印机") is None
    chinese = search(principal=reader(english), kb=english, query="打印机的端口")
    assert chinese.hits[0].document_key == "打印"
