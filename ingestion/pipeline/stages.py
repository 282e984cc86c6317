"""What every stage shares: its StageResult, reused when it already succeeded for the same input
(shared stages: another task's result for the same input serves), and the errors no retry heals."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from django.db.models import F
from django.db.models.functions import Now

from ingestion.models import StageResult
from kb.models import PIPELINE_VERSION
from textkit.reasons import Reason, ReasonedError
from work.leases import Lease, fenced

JsonDict = dict[str, Any]


class TerminalError(ReasonedError):
    """Retrying cannot help (bad file, shape mismatch): the build fails with this message, a
    declared reason where a person may read it (`kb.failures`). `code` is the task's."""

    def __init__(self, code: str, message: str | Reason) -> None:
        super().__init__(message)
        self.code = code


def stage_run(
    *,
    lease: Lease,
    stage: str,
    fingerprint: str,
    compute: Callable[[], JsonDict],
    reusable: Callable[[JsonDict], bool] | None = None,
    shared: bool = False,
) -> JsonDict:
    """Reuse a succeeded StageResult for this input (unless `reusable` says its output is gone),
    or compute and record it (fenced).

    `shared`: the output is a function of the fingerprint alone (parse: the file's bytes;
    chunk: the extracted text and the chunker's settings), so another task's result serves
    too — a new index version's builds re-read no file and re-chunk nothing that an earlier
    build of the same revision did (a PDF's parse is most of its ingest)."""
    key: dict[str, Any] = {
        "task_id": lease.task_id,
        "stage": stage,
        "input_fingerprint": fingerprint,
        "pipeline_version": PIPELINE_VERSION,
    }
    succeeded = StageResult.objects.filter(
        stage=stage,
        input_fingerprint=fingerprint,
        pipeline_version=PIPELINE_VERSION,
        status=StageResult.Status.SUCCEEDED,
    )
    if not shared:
        succeeded = succeeded.filter(task_id=lease.task_id)
    done = succeeded.order_by("-pk").first()
    if done is not None and (reusable is None or reusable(done.output)):
        return done.output
    with fenced(lease):
        _, created = StageResult.objects.get_or_create(**key)
        if not created:
            StageResult.objects.filter(**key).update(attempts=F("attempts") + 1)
    output = compute()
    with fenced(lease):
        StageResult.objects.filter(**key).update(
            status=StageResult.Status.SUCCEEDED, output=output, updated_at=Now()
        )
    return output


def fingerprint(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()
