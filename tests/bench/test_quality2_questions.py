"""B8's second corpus: its natural questions (bench/quality2/natural.jsonl), their fixed split
(splits.json) and the way B8's run is pointed at them (bench.quality2, run.py's options)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench import common
from bench.quality import check_natural, run
from bench.quality import splits as splits1
from bench.quality.report import print_report
from bench.quality2 import __main__ as quality2
from bench.quality2 import corpus, splits


def _questions() -> list[dict[str, Any]]:
    return [dict(q) for q in splits1.read_questions(splits.NATURAL)]


def test_the_committed_split_is_what_the_function_gives() -> None:
    """splits.json never changes silently: regenerating it from natural.jsonl gives the file."""
    assert splits.render(splits1.read_questions(splits.NATURAL)) == splits.SPLITS.read_text(
        encoding="utf-8"
    )
    assert splits.main(["--check"]) == 0


def test_every_question_has_a_split_each_kind_halved_with_a_seed_of_its_own() -> None:
    questions = _questions()
    assigned = splits.load()
    assert set(assigned) == {str(q["id"]) for q in questions}
    per_kind = Counter((str(q["kind"]), assigned[str(q["id"])]) for q in questions)
    for kind in check_natural.KINDS:
        tuning, heldout = per_kind[(kind, splits1.TUNING)], per_kind[(kind, splits1.HELDOUT)]
        assert tuning > 0 and heldout - tuning in (0, 1), kind
    data = json.loads(splits.SPLITS.read_text(encoding="utf-8"))
    assert data["seed"] == splits.SEED != splits1.SEED
    assert "bench/quality2/natural.jsonl" in data["about"]
    assert splits1.assign(questions, seed=splits.SEED) == assigned


def test_every_question_is_well_formed_and_each_kind_has_its_minimum() -> None:
    """The file's own checks, with the answer keys taken as given (the manifest lives under
    .data/; the next test checks the keys against it when the corpus is built)."""
    questions = _questions()
    keys = {a for q in questions for a in q["answers"]}
    problems = {q["id"]: check_natural.check_question(q, keys) for q in questions}
    assert {qid: p for qid, p in problems.items() if p} == {}
    assert [q["id"] for q in questions] == [f"nat-{i:03d}" for i in range(1, len(questions) + 1)]
    texts = [str(q["question"]).strip().lower() for q in questions]
    assert len(set(texts)) == len(texts)
    counts = Counter(str(q["kind"]) for q in questions)
    assert all(counts[kind] >= n for kind, n in corpus.MINIMUM.items()), counts
    assert sum(counts.values()) >= 150


def test_answers_exist_and_the_cross_lingual_kinds_have_no_translation_to_lean_on() -> None:
    """With the corpus built: every answer key is in the manifest, and no zh-to-en answer has a
    Chinese twin in the corpus (nor an en-to-zh answer an English one), so that the kind really
    asks across languages."""
    if not corpus.MANIFEST.exists():
        pytest.skip(f"no {corpus.MANIFEST}: run `python -m bench.quality2.corpus`")
    assert corpus.check() == 0
    keys = check_natural.load_manifest(corpus.MANIFEST)
    twins = [
        (q["id"], a)
        for q in _questions()
        for a in q["answers"]
        if (q["kind"] == "zh-to-en" and "zh/" + a[3:] in keys)
        or (q["kind"] == "en-to-zh" and "en/" + a[3:] in keys)
    ]
    assert twins == []


def test_the_checker_applies_the_minimum_it_is_given(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps([{"key": "en/a.html"}]))
    questions = tmp_path / "q.jsonl"
    q = {"id": "nat-001", "kind": "en-fact", "lang": "en", "question": "q?"}
    questions.write_text(json.dumps({**q, "answers": ["en/a.html"], "where": "a"}) + "\n")
    one = dict.fromkeys(check_natural.KINDS, 0) | {"en-fact": 1}
    assert check_natural.check(questions, manifest, minimum=one) == 0
    assert check_natural.check(questions, manifest, minimum=corpus.MINIMUM) == 1
    assert check_natural.check(questions, manifest) == 1  # the first corpus's minimum


def test_b8_on_corpus_2_runs_with_its_own_files_database_and_results() -> None:
    argv = quality2.defaults()
    a = dict(zip(argv[::2], argv[1::2], strict=False))
    assert a["--corpus"] == str(corpus.CORPUS) and a["--natural"] == str(splits.NATURAL)
    assert a["--splits"] == str(splits.SPLITS) and "--no-keyword" in argv
    assert quality2.DB_NAME != "canon_quality" and quality2.REDIS_DB != 2
    outputs = run.Outputs.named(quality2.RESULTS_NAME)
    assert outputs.results == common.RESULTS / "quality2.json"
    assert outputs.legs == common.RESULTS / "quality2-legs.json"
    assert run.Outputs.named("quality").results == common.RESULTS / "quality.json"
    with pytest.raises(SystemExit, match="plain file name"):
        run.Outputs.named("../elsewhere")


def test_b8_refuses_a_run_with_no_question_set(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        run.main(["--no-natural", "--no-keyword"])
    assert exc.value.code == 2
    assert "leave no question to ask" in capsys.readouterr().err


def test_the_report_of_a_natural_only_run_has_no_keyword_tables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    empty = {lang: {"n": 0} for lang in ("en", "zh", "all")}
    figs = {"n": 1, "hit@1": 1.0, "hit@5": 1.0, "hit@10": 1.0, "mrr@10": 1.0}
    groups = {g: figs for g in (*check_natural.KINDS, "en", "zh", "all")}
    natural = {name: {"tuning": groups, "heldout": groups} for name in run.CANON_MODES}
    summary: dict[str, Any] = {
        "provider": {"provider": "hash", "model": "m", "dimensions": 8},
        "corpus": {"documents": 1, "questions": 1, "questions_by_lang": {}, "questions_by_set": {}},
        "ingest": {"live": 1, "failed": 0, "documents": 1, "chunks": 1, "ingest_s": 1.0}
        | {"chunks_per_s": 1.0},
        "metrics": {name: empty for name in run.CANON_MODES},
        "natural": natural,
        "natural_targets": {},
        "latency": {"canon vector": {"p50_ms": 1.0, "p95_ms": 2.0}},
        "targets": {"legs": {}, "keyword_ge_bm25s": {}, "hybrid_ge_every_contender": {}},
        "run_s": 1.0,
    }
    summary["corpus"]["questions_by_set"] = {"natural": 1}
    print_report(summary, written=("r.json", "d.json", "l.json"))
    out = capsys.readouterr().out
    assert "natural set, held-out half" in out
    assert "keyword-style set" not in out
    assert "wrote r.json, d.json, l.json" in out


def _learned_dump(chunks: int) -> dict[str, Any]:
    """A one-question per-leg dump of a run whose default fusion is the learned one."""
    entry = {"rank": 1, "chunk": 1, "doc": "en/a.html", "score": 5.0, "cos": 0.9, "cjk": 0.0}
    entry |= {"bm25": 5.0, "matched": 1, "idf_matched": 2.0}
    question: dict[str, Any] = {
        "id": "nat-001",
        "set": "natural",
        "kind": "en-fact",
        "split": "heldout",
        "lang": "en",
        "question": "q",
        "answers": ["en/a.html"],
        "query": {"terms": ["x"], "present": [["x", 2.0, 3]], "avg_length": 50.0, "cjk": 0.0},
        "vector": [entry],
        "keyword": [entry],
        "canon": {"hybrid": [[1, "en/a.html", 1.0]], "vector": [[1, "en/a.html", 0.9]]},
    }
    question["canon"]["keyword"] = [[1, "en/a.html", 5.0]]
    settings = {"HYBRID_FUSION": "learned", "HYBRID_VECTOR_WEIGHT": 0.15, "hybrid_depth": 30}
    return {"about": {"settings": settings, "chunks": chunks}, "questions": [question]}


def test_the_offline_replay_reads_its_own_dumps_chunk_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replaying corpus 2's dump must not read the first corpus's dump (its default path) for the
    chunk count its IDFs use: that file may be missing, or hold another corpus's count."""
    from bench.quality import fusion_fit, offline

    monkeypatch.setattr(fusion_fit, "CHUNKS", [0])
    monkeypatch.setattr(fusion_fit, "LEGS", tmp_path / "missing-quality-legs.json")
    ok, lines = offline.check(_learned_dump(22574))
    assert ok, lines
    assert fusion_fit.CHUNKS == [22574]
    other = tmp_path / "quality-legs.json"
    other.write_text(json.dumps({"about": {"chunks": 49222}}))
    monkeypatch.setattr(fusion_fit, "LEGS", other)
    monkeypatch.setattr(fusion_fit, "CHUNKS", [0])
    offline.check(_learned_dump(1000))
    assert fusion_fit.CHUNKS == [1000]
