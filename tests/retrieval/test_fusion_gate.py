"""The learned fusion's keyword gate: the keyword leg's near-best matches keep a place in the
answer and its strong ones their keyword rank, whatever the model thinks of them; explain says
so in words."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from retrieval.search import fusion
from retrieval.search.fusion import KeywordGate, keyword_floor
from retrieval.search.hits import Hit, Leg
from retrieval.search.ranking import explain_ranking
from tests.retrieval.factories import hit


def ids(hits: list[Hit]) -> list[int]:
    return [h.chunk_id for h in hits]


def test_which_keyword_matches_a_gate_keeps() -> None:
    gate = KeywordGate(ranks=3, share=0.2, of_best=0.8, at_rank=0.45)
    keyword = [(7, 5.0), (8, 4.2), (9, 3.0), (10, 4.9)]
    # bound 10: 7 holds 50 % (strong: it keeps its rank); 8 holds 42 %, 84 % of the best (kept
    # in the answer); 9 holds 30 % but 60 % of the best (not kept); 10 is past the first three
    assert gate.floors(keyword, 10.0) == {7: (1, True), 8: (2, False)}
    # no bound (nothing the query's terms could score) or no keyword hit: nothing is kept
    assert gate.floors(keyword, 0.0) == {} and gate.floors([], 10.0) == {}
    # without `at_rank` no match keeps its rank
    assert KeywordGate(ranks=3, share=0.2, of_best=0.8).floors(keyword, 10.0) == {
        7: (1, False),
        8: (2, False),
    }


def test_the_gate_holds_for_chinese_queries_only_when_told() -> None:
    assert KeywordGate(ranks=10, share=0.1).holds_for(0.0)
    assert not KeywordGate(ranks=10, share=0.1).holds_for(0.9)
    assert KeywordGate(ranks=10, share=0.1, chinese=True).holds_for(0.9)


def test_a_strong_match_moves_up_to_its_keyword_rank() -> None:
    documents = {1: "a", 2: "b", 3: "c", 4: "d", 9: "kw"}
    # the model put the strong keyword match (keyword rank 2) last
    order, kept = keyword_floor([1, 2, 3, 4, 9], {9: (2, True)}, documents, top_k=4)
    assert order == [1, 9, 2, 3]
    assert kept == {9: (2, True)}


def test_a_near_best_match_takes_the_last_place_of_the_answer() -> None:
    documents = {1: "a", 2: "b", 3: "c", 4: "d", 8: "kw1", 9: "kw2"}
    order, kept = keyword_floor(
        [1, 2, 3, 4, 8, 9], {9: (1, False), 8: (2, False)}, documents, top_k=4
    )
    # both keep a place in the top 4: the last two, in their keyword order
    assert order == [1, 2, 9, 8]
    assert kept == {9: (1, False), 8: (2, False)}


def test_strong_and_near_best_matches_together() -> None:
    documents = {1: "a", 2: "b", 3: "c", 8: "near", 9: "strong"}
    order, kept = keyword_floor([1, 2, 3, 8, 9], {9: (1, True), 8: (2, False)}, documents, top_k=3)
    assert order == [9, 1, 8]
    assert kept == {9: (1, True), 8: (2, False)}


def test_a_document_already_high_enough_stays_where_it_is() -> None:
    documents = {1: "a", 2: "kw", 3: "c", 9: "kw"}
    # chunk 2 holds the document at place 2; its strong chunk 9 is keyword rank 3
    assert keyword_floor([1, 2, 3, 9], {9: (3, True)}, documents, top_k=3) == ([1, 2, 3], {})
    # and a near-best match whose document is in the answer at all is not moved
    assert keyword_floor([1, 2, 3, 9], {9: (1, False)}, documents, top_k=3) == ([1, 2, 3], {})


def test_each_document_is_kept_once_at_its_best_keyword_rank() -> None:
    documents = {1: "a", 2: "b", 3: "c", 8: "kw", 9: "kw", 10: "other"}
    floors = {9: (1, True), 8: (2, True), 10: (3, True)}
    order, kept = keyword_floor([1, 2, 3, 8, 9, 10], floors, documents, top_k=4)
    # "kw" at keyword rank 1 (its chunk 9), "other" at rank 3; its buried chunk 8 is not kept
    assert order == [9, 1, 10, 2]
    assert kept == {9: (1, True), 10: (3, True)}


def test_a_keyword_rank_below_top_k_is_no_floor() -> None:
    documents = {1: "a", 2: "b", 9: "kw"}
    assert keyword_floor([1, 2, 9], {9: (3, True)}, documents, top_k=2) == ([1, 2], {})


def _vector_only_model(gate: KeywordGate | None) -> fusion.FusionModel:
    """A model that follows the vector leg's cosine alone (and the gate, when given)."""
    weights = [0.0] * len(fusion.FEATURES)
    weights[fusion.FEATURES.index("cos")] = 10.0
    return fusion.FusionModel(
        features=fusion.FEATURES,
        mean=(0.0,) * len(fusion.FEATURES),
        scale=(1.0,) * len(fusion.FEATURES),
        weights=tuple(weights),
        bias=0.0,
        depth=30,
        gate=gate,
    )


LEGS = (
    # the vector leg found four other documents; the keyword leg is sure of chunk 9 (80 % of
    # what the query's terms could score), which the vector leg did not find, then chunk 5
    # (75 % of the best) and chunk 2
    [hit(1, 0.62), hit(2, 0.61), hit(3, 0.60), hit(4, 0.59)],
    [replace(hit(9, 8.0), text="apt-mark hold keeps a package"), hit(5, 6.0), hit(2, 1.0)],
)
GATE = KeywordGate(ranks=10, share=0.1, of_best=0.7, at_rank=0.7)


def test_without_the_gate_the_model_buries_the_keyword_only_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fusion, "model", lambda: _vector_only_model(None))
    vector, keyword = LEGS
    fused = fusion.fuse(
        vector=vector, keyword=keyword, top_k=3, method="learned", query="q", keyword_bound=10.0
    )
    assert 9 not in ids(fused) and 5 not in ids(fused)


def test_with_the_gate_the_keyword_answers_keep_their_places_and_explain_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fusion, "model", lambda: _vector_only_model(GATE))
    vector, keyword = LEGS
    fused = fusion.fuse(
        vector=vector, keyword=keyword, top_k=3, method="learned", query="q", keyword_bound=10.0
    )
    # 9 keeps its keyword rank (strong), 5 the last place (75 % of the best)
    assert ids(fused) == [9, 1, 5]
    # scores still fall with the rank: each place keeps the model's score of that place
    assert fused[0].score >= fused[1].score >= fused[2].score
    explained = explain_ranking(
        mode="hybrid", query="q", legs=[Leg(vector, 1.0), Leg(keyword, 10.0)], hits=fused
    )
    assert explained.hits[9]["fused"]["kept"] == {
        "keyword_rank": 1,
        "at_rank": True,
        "why": "kept at rank 1 or better by the keyword gate: keyword rank 1, a strong keyword "
        "match (80% of what the query's words could score), which the vector leg did not find",
    }
    assert explained.hits[5]["fused"]["kept"]["why"] == (
        "kept in the top 3 by the keyword gate: keyword rank 2, 75% of the keyword list's best "
        "match, which the vector leg did not find"
    )
    # a hit the model placed itself says nothing of the gate
    assert "kept" not in explained.hits[1]["fused"]


def test_a_chinese_query_is_not_gated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fusion, "model", lambda: _vector_only_model(GATE))
    vector, keyword = LEGS
    fused = fusion.fuse(
        vector=vector,
        keyword=keyword,
        top_k=3,
        method="learned",
        query="哪些软件包被保持",
        keyword_bound=10.0,
    )
    assert ids(fused) == [1, 2, 3]


def test_the_model_file_carries_the_gate(tmp_path: Path) -> None:
    raw = json.loads(fusion.MODEL_PATH.read_text(encoding="utf-8"))
    raw["gate"] = {"ranks": 4, "share": 0.35, "of_best": 0.5, "at_rank": None, "chinese": False}
    path = tmp_path / "model.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    assert fusion.model.__wrapped__(path).gate == KeywordGate(ranks=4, share=0.35, of_best=0.5)
    del raw["gate"]
    path.write_text(json.dumps(raw), encoding="utf-8")
    assert fusion.model.__wrapped__(path).gate is None


def test_the_shipped_model_has_the_gate_the_cross_corpus_run_chose() -> None:
    # bench.quality.cross_corpus chose it (docs/BENCHMARKS.md, B8 across corpora)
    assert fusion.model().gate == KeywordGate(ranks=10, share=0.1, of_best=0.8, at_rank=0.3)
