"""A knowledge base for the fusion calibration's tests: `n` topics, each with its answer
(every word of its question) and a decoy (one of them, among filler), so both legs put the
answer first and a fusion that weighs them the right way round finds every answer at rank 1.
`bad_default()` is the shipped model's weights turned round (and no keyword gate): a default
this knowledge base's questions can clearly beat."""

from __future__ import annotations

from dataclasses import replace

from evaluation.models import QuestionSet
from evaluation.question_files import read_rows
from evaluation.services.question_sets import (
    question_set_create,
    questions_check,
    questions_import,
)
from kb.access import Reader
from kb.models import KnowledgeBase
from retrieval.search import fusion
from retrieval.search.fusion import FusionModel
from tests.retrieval.factories import publish

SYLLABLES = ("ka", "lo", "mi", "nu", "pe", "ro", "sa", "ti", "vu", "ze", "bo", "du")


def words(topic: int) -> list[str]:
    """Four made-up words only topic `topic` uses."""
    return [
        SYLLABLES[topic % 12] + SYLLABLES[(topic // 12 + k) % 12] + SYLLABLES[k] + f"x{topic}"
        for k in range(4)
    ]


def publish_topics(kb: KnowledgeBase, n: int) -> None:
    for topic in range(n):
        w = words(topic)
        publish(kb, f"answer-{topic}", f"{' '.join(w)}. This note explains {w[0]} and {w[1]}.")
        publish(
            kb,
            f"decoy-{topic}",
            f"A general remark that mentions {w[3]} once, among other office matters "
            "such as the kitchen rota and the printer on the second floor.",
        )


def topic_set(kb: KnowledgeBase, n: int, name: str = "Topics") -> QuestionSet:
    question_set = question_set_create(kb=kb, name=name)
    reader = Reader(tenant_id=kb.tenant_id, access_groups=frozenset(), all_groups=True)
    rows = [
        {
            "id": f"t{topic:02d}",
            "question": " ".join(words(topic)),
            "expected_documents": [f"answer-{topic}"],
        }
        for topic in range(n)
    ]
    checked = questions_check(question_set=question_set, raw=read_rows(rows), reader=reader)
    assert checked.ok, [str(p) for p in checked.problems]
    questions_import(question_set=question_set, checked=checked, reader=reader)
    question_set.refresh_from_db()
    return question_set


def bad_default() -> FusionModel:
    """The shipped model with every weight turned round and no keyword gate."""
    shipped = fusion.model()
    return replace(shipped, weights=tuple(-w for w in shipped.weights), gate=None)
