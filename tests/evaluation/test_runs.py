"""Evaluation runs through the services and the leased executor (in this process, as a worker
runs them): every question in every mode through the API's search, the results and figures,
the version pinned and its settings kept, what the requester may read, candidates, a set that
changes mid-run, a resumed run, and the refusals."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from evaluation import metrics
from evaluation.models import EvaluationResult, EvaluationRun, QuestionSet
from evaluation.question_files import read_rows
from evaluation.run import run_summary, search_settings
from evaluation.services.question_sets import (
    question_delete,
    question_set_create,
    questions_check,
    questions_import,
)
from evaluation.services.runs import evaluation_request, evaluation_runs_close_orphaned
from ingestion.pipeline.run import task_execute
from kb.models import KnowledgeBase
from kb.services.base import ActionRefused
from kb.services.index_versions import index_version_create, knowledge_base_create
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.evaluation.conftest import (
    EVERYTHING,
    QUESTIONS,
    reader_of,
    run_evaluation,
    summary_without_latency,
)
from tests.helpers import run_pending
from work.models import IngestionTask

pytestmark = pytest.mark.django_db

Evaluate = Callable[[EvaluationRun], EvaluationRun]


def test_a_run_asks_every_question_in_every_mode_and_sums_up_its_results(
    corpus: KnowledgeBase, question_set: QuestionSet, evaluate: Evaluate
) -> None:
    run, created = evaluation_request(
        kb=corpus,
        question_set=question_set,
        modes=["hybrid", "keyword", "vector"],
        reader=reader_of(corpus),
    )
    assert created and run.state == "queued" and run.task is not None
    assert run.task.kind == IngestionTask.Kind.EVALUATION

    run = evaluate(run)

    assert run.state == "succeeded", run.error
    assert run.index_version_id == corpus.active_index_version_id  # pinned when it started
    assert run.index_version is not None
    assert run.search_settings == search_settings(run.index_version, top_k=10)
    assert run.search_settings["index_version"]["chunk_size"] == run.index_version.chunk_size
    assert len(run.search_settings["fusion"]["model_sha256"]) == 64
    results = EvaluationResult.objects.filter(run=run)
    assert results.count() == len(QUESTIONS) * 3
    keyword = {r.external_id: r for r in results.filter(mode="keyword")}
    assert keyword["q-refund"].rank == 1 and keyword["q-refund"].returned_keys[0] == "refunds"
    assert keyword["q-refund"].passage_found is True
    assert keyword["q-leave"].passage_found is None  # no expected passage
    assert keyword["q-zh"].rank == 1 and keyword["q-zh"].language == "zh"
    assert keyword["q-miss"].rank is None
    # the rank is the one the API's search gives, asked as the requester
    principal = Principal(tenant_id=corpus.tenant_id, kb_ids=None, access_groups=frozenset())
    for result in results:
        hits = search(principal=principal, kb=corpus, query=result.text, mode=result.mode).hits
        keys = [hit.document_key for hit in hits]
        assert result.rank == metrics.first_rank(keys, result.expected_keys), result
        assert result.returned_keys == metrics.distinct_documents(keys)
    # the figures are the results' own, per mode, language and tag
    assert run.summary == run_summary(run)
    figures = run.summary["keyword"]
    assert figures["all"]["n"] == 6 and figures["all"]["hit@10"] == pytest.approx(5 / 6, abs=1e-4)
    assert set(figures["language"]) == {"en", "zh"} and figures["language"]["zh"]["n"] == 1
    assert set(figures["tag"]) == {"money", "travel"} and figures["tag"]["travel"]["n"] == 2
    assert figures["latency_ms"]["p50"] > 0


def test_a_run_reads_only_what_its_requester_may_read(
    corpus: KnowledgeBase, evaluate: Evaluate
) -> None:
    question_set = question_set_create(kb=corpus, name="Pay")
    rows = [{"id": "pay", "question": "when are salaries paid", "expected_documents": ["payroll"]}]
    hr = reader_of(corpus, "hr")
    questions_import(
        question_set=question_set,
        checked=questions_check(question_set=question_set, raw=read_rows(rows), reader=hr),
        reader=hr,
    )

    outsider = evaluate(
        evaluation_request(
            kb=corpus, question_set=question_set, modes=["keyword"], reader=reader_of(corpus)
        )[0]
    )
    insider = evaluate(
        evaluation_request(kb=corpus, question_set=question_set, modes=["keyword"], reader=hr)[0]
    )

    (missed,) = outsider.results.all()
    assert missed.rank is None and "payroll" not in missed.returned_keys
    assert (outsider.access_groups, outsider.all_groups) == ([], False)
    assert insider.results.get().rank == 1


def test_a_run_asks_a_candidate_version_by_the_version_override(
    corpus: KnowledgeBase, question_set: QuestionSet, evaluate: Evaluate
) -> None:
    candidate = index_version_create(
        kb_id=corpus.pk,
        provider="hash",
        model="canon-hash-candidate",
        dimensions=64,
        chunk_size=300,
        chunk_overlap=30,
    )
    run_pending()

    run = evaluate(
        evaluation_request(
            kb=corpus,
            question_set=question_set,
            modes=["vector"],
            reader=EVERYTHING,
            index_version=candidate,
        )[0]
    )

    assert (run.target, run.index_version_id) == ("candidate", candidate.pk)
    assert run.search_settings["index_version"]["model"] == "canon-hash-candidate"
    assert run.search_settings["index_version"]["dimensions"] == 64
    corpus.refresh_from_db()
    assert corpus.active_index_version_id != candidate.pk  # only asked, never swapped
    principal = Principal(
        tenant_id=corpus.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
    )
    for result in run.results.all():
        hits = search(
            principal=principal,
            kb=corpus,
            query=result.text,
            mode="vector",
            index_version=candidate,
        ).hits
        assert result.returned_keys == metrics.distinct_documents([h.document_key for h in hits])


def test_a_set_that_changes_before_the_run_starts_fails_it_readably(
    corpus: KnowledgeBase, question_set: QuestionSet, evaluate: Evaluate
) -> None:
    run, _ = evaluation_request(
        kb=corpus, question_set=question_set, modes=["keyword"], reader=EVERYTHING
    )
    question_delete(question=question_set.questions.get(external_id="q-miss"))

    run = evaluate(run)

    assert run.state == "failed"
    assert "The question set changed while the run went on (version 2 → 3)" in run.error
    assert run.task is not None and run.task.status == "succeeded"  # nothing to retry


def test_a_resumed_run_skips_what_it_wrote_and_ends_with_the_same_figures(
    corpus: KnowledgeBase, question_set: QuestionSet, evaluate: Evaluate
) -> None:
    whole = evaluate(
        evaluation_request(
            kb=corpus, question_set=question_set, modes=["hybrid", "keyword"], reader=EVERYTHING
        )[0]
    )
    # given: a second run whose earlier attempt wrote half its results, then lost its worker
    run, _ = evaluation_request(
        kb=corpus, question_set=question_set, modes=["hybrid", "keyword"], reader=EVERYTHING
    )
    for result in whole.results.order_by("pk")[:6]:
        result.pk = None
        result.run = run
        result.latency_ms = 9999.0  # a mark: a rewritten result would not carry it
        result.save()
    EvaluationRun.objects.filter(pk=run.pk).update(state="running")

    run = evaluate(run)

    assert run.state == "succeeded"
    assert run.results.count() == whole.results.count()
    assert run.results.filter(latency_ms=9999.0).count() == 6
    assert summary_without_latency(run.summary) == summary_without_latency(whole.summary)


def test_asking_again_while_a_run_is_open_returns_it(
    corpus: KnowledgeBase, question_set: QuestionSet
) -> None:
    first, created = evaluation_request(
        kb=corpus, question_set=question_set, modes=["keyword"], reader=EVERYTHING
    )
    again, created_again = evaluation_request(
        kb=corpus, question_set=question_set, modes=["keyword"], reader=EVERYTHING
    )
    other, created_other = evaluation_request(
        kb=corpus, question_set=question_set, modes=["vector"], reader=EVERYTHING
    )

    assert (created, created_again, created_other) == (True, False, True)
    assert again.pk == first.pk != other.pk


def test_a_run_whose_task_died_is_closed_with_its_reason(
    corpus: KnowledgeBase, question_set: QuestionSet
) -> None:
    run, _ = evaluation_request(
        kb=corpus, question_set=question_set, modes=["keyword"], reader=EVERYTHING
    )
    assert run.task_id is not None
    IngestionTask.objects.filter(pk=run.task_id).update(
        status="dead", last_error="gave up after 5 attempts: OperationalError"
    )

    assert evaluation_runs_close_orphaned() == 1
    run.refresh_from_db()
    assert run.state == "failed" and run.error == "gave up after 5 attempts: OperationalError"
    assert evaluation_runs_close_orphaned() == 0
    # a late message for the dead task runs nothing
    assert task_execute(task_id=run.task_id, worker_id="late") == "not_claimed"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"modes": []}, "Choose one or more modes"),
        ({"modes": ["fuzzy"]}, "Choose one or more modes"),
        ({"empty": True}, "has no questions yet"),
        ({"foreign_version": True}, "belongs to another knowledge base"),
    ],
)
def test_what_a_request_refuses(
    corpus: KnowledgeBase, question_set: QuestionSet, change: dict[str, object], words: str
) -> None:
    kwargs: dict[str, object] = {"modes": change.get("modes", ["keyword"])}
    chosen = question_set
    if change.get("empty"):
        chosen = question_set_create(kb=corpus, name="Empty")
    if change.get("foreign_version"):
        other = knowledge_base_create(tenant=corpus.tenant, name="Other", slug="other")
        kwargs["index_version"] = other.active_index_version

    with pytest.raises(ActionRefused, match=words):
        evaluation_request(
            kb=corpus,
            question_set=chosen,
            reader=EVERYTHING,
            **kwargs,  # type: ignore[arg-type]
        )
    assert not EvaluationRun.objects.exists()


def test_run_evaluation_runs_nothing_for_a_finished_run(
    corpus: KnowledgeBase, question_set: QuestionSet, evaluate: Evaluate
) -> None:
    run = evaluate(
        evaluation_request(
            kb=corpus, question_set=question_set, modes=["keyword"], reader=EVERYTHING
        )[0]
    )
    assert run_evaluation(run) == "not_claimed"
