"""How the pipeline classifies an error (`ingestion.pipeline.run.classify`): a bad file, an
incomplete build or a wrong vector shape is terminal; a provider outage, a lost connection or
anything unexpected is retried."""

from __future__ import annotations

import pytest

import embeddings
from ingestion.pipeline.run import classify
from ingestion.pipeline.stages import TerminalError
from kb.completeness import IncompleteBuild

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (TerminalError("unparseable", "bad file"), False),
        (IncompleteBuild("missing chunks"), False),
        (embeddings.EmbeddingShapeError("wrong dimensions"), False),
        (embeddings.ProviderUnavailable("503"), True),
        (ConnectionError("reset"), True),
        (RuntimeError("unexpected"), True),
    ],
)
def test_errors_are_classified(error: Exception, retryable: bool) -> None:
    assert classify(error)[0] is retryable
