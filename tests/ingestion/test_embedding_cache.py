"""The embedding cache: a one-paragraph edit of a long document embeds only the chunks that
changed; the others' vectors come from the cache."""

from __future__ import annotations

import pytest

from ingestion.models import StageResult
from ingestion.pipeline.run import task_execute
from kb.models import Build, KnowledgeBase
from tests.helpers import upload_task

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_one_paragraph_edit_embeds_only_the_changed_chunks(kb: KnowledgeBase) -> None:
    paragraphs = [
        f"Paragraph {i} about topic {i}. " + " ".join(f"w{i}x{j}" for j in range(80))
        for i in range(200)
    ]
    first = upload_task(kb, "long", "\n\n".join(paragraphs))
    task_execute(task_id=first.pk, worker_id="w")
    paragraphs[100] = "Paragraph 100 was rewritten entirely with new words."
    second = upload_task(kb, "long", "\n\n".join(paragraphs))
    task_execute(task_id=second.pk, worker_id="w")

    embed = StageResult.objects.get(task=second, stage="embed").output
    total = embed["embedded"] + embed["cached"]
    assert total >= 190
    assert embed["embedded"] / total <= 0.02, embed
    assert Build.objects.get(tasks=second).state == "live"
