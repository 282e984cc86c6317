"""Running one ingestion task: claim -> parse -> chunk -> embed -> write -> finalize (switch).

Each stage records a StageResult keyed by task + stage + input fingerprint + pipeline version and
reuses a succeeded one, so a redelivered or retried task redoes only unfinished work. No network
call and no file parsing happens inside a database transaction; every write that matters is
fenced by the task's lease (`work.leases.fenced`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction

import embeddings
from ingestion.models import StageResult
from ingestion.pipeline.chunk import chunk
from ingestion.pipeline.embed import embed, english_expected
from ingestion.pipeline.parse import parse, parse_context, parse_options, record_title
from ingestion.pipeline.stages import JsonDict, TerminalError, fingerprint, stage_run
from ingestion.pipeline.write import write
from ingestion.task_outcomes import (
    PROVIDER_UNAVAILABLE,
    STORAGE_UNAVAILABLE,
    task_fail,
    task_retry_later,
    task_succeed,
    task_wait_for_provider,
)
from kb import storage
from kb.ann_build import ann_index_after_build
from kb.completeness import IncompleteBuild
from kb.failures import NOTHING_TO_INDEX
from kb.models import Build
from kb.services.documents import document_purge
from kb.services.publication import build_publish
from kb.transactions import retry_conflicts
from textkit.reasons import ReasonedError
from work import faults
from work.backoff import backoff_seconds
from work.leases import Heartbeat, Lease, LeaseLost, fenced, task_claim
from work.models import IngestionTask

logger = logging.getLogger(__name__)

# Runners of task kinds that live on a higher floor, by kind, registered by their app's
# `ready()` (a source's sync: `sources.apps`). Each takes the task and its lease and returns
# what happened; it runs under the same heartbeat and error handling as a build.
TASK_RUNNERS: dict[str, Callable[..., str]] = {}


def task_execute(*, task_id: int, worker_id: str) -> str:
    """Run a task if it can be claimed; return what happened (for logs and tests).

    Idempotent: a duplicate or late message for a task that is done, or held by a live lease,
    claims nothing and returns "not_claimed".
    """
    lease = task_claim(task_id=task_id, owner=worker_id)
    if lease is None:
        return "not_claimed"
    task = IngestionTask.objects.get(pk=task_id)
    try:
        return _task_run(task=task, lease=lease, worker_id=worker_id)
    finally:
        if task.kind == IngestionTask.Kind.BUILD and task.build_id is not None:
            # A new version's last build written: its vector index is built now (kb.ann_build).
            ann_index_after_build(build_id=task.build_id)


def _task_run(*, task: IngestionTask, lease: Lease, worker_id: str) -> str:
    task_id = task.pk
    log = {"task_id": task_id, "build_id": task.build_id, "lease_owner": worker_id}
    try:
        with Heartbeat(lease):
            if task.kind == IngestionTask.Kind.BUILD:
                outcome = build_run(task=task, lease=lease)
            elif task.kind == IngestionTask.Kind.DELETE:
                outcome = purge_run(task=task, lease=lease)
            elif task.kind in TASK_RUNNERS:
                outcome = TASK_RUNNERS[task.kind](task=task, lease=lease)
            else:
                raise TerminalError("unknown_kind", f"task kind {task.kind!r} is not runnable")
        logger.info("task finished: %s", outcome, extra=log)
        return outcome
    except LeaseLost:
        logger.warning("lease lost; stopping without writing", extra=log)
        return "lease_lost"
    except embeddings.ProviderUnavailable as exc:
        # The provider is down, slow or rate limiting (or its breaker is open): not this task's
        # fault. Wait for the next probe without spending an attempt; the build keeps building.
        until = _provider_retry_time(exc)
        logger.warning(
            "waiting for the embedding provider until %s: %s", until.isoformat(), exc, extra=log
        )
        _fail_quietly(
            task_wait_for_provider, lease=lease, until=until, message=str(exc), reason=exc.reason
        )
        return PROVIDER_UNAVAILABLE
    except storage.StorageUnavailable as exc:
        # The object store is down or slow: as for a provider, wait without spending an attempt
        # (search keeps serving what is published; nothing was written for this stage).
        until = _storage_retry_time()
        logger.warning("waiting for the file store until %s: %s", until.isoformat(), exc, extra=log)
        _fail_quietly(
            task_wait_for_provider,
            lease=lease,
            until=until,
            message=str(exc),
            code=STORAGE_UNAVAILABLE,
        )
        return STORAGE_UNAVAILABLE
    except Exception as exc:
        if isinstance(exc, InterfaceError | OperationalError):
            # The connection may be dead (killed backend, failover): reconnect to record.
            connection.close()
        retryable, code = classify(exc)
        message = str(exc) if not retryable else f"{type(exc).__name__}: {exc}"
        # A declared reason (a file's, a provider's, the pipeline's) the admin words again.
        reason = exc.reason if isinstance(exc, ReasonedError) else None
        if retryable:
            # Connection loss, serialization failure, deadlock, provider outage: try again later.
            logger.warning("task will be retried: %s", message, extra=log, exc_info=True)
            _fail_quietly(task_retry_later, lease=lease, code=code, message=message, reason=reason)
            return "retry"
        logger.warning("task failed: %s", message, extra=log)
        _fail_quietly(task_fail, lease=lease, code=code, message=message, reason=reason)
        return "failed"


def classify(exc: BaseException) -> tuple[bool, str]:
    """(retryable, error code). Terminal: the input itself is bad, so retrying cannot help.
    Anything unexpected is retried; the attempt cap turns a crash loop into a dead task."""
    if isinstance(exc, TerminalError):
        return False, exc.code
    if isinstance(exc, IncompleteBuild):
        return False, "incomplete_build"
    if isinstance(exc, embeddings.EmbeddingError):
        return exc.retryable, type(exc).__name__
    return True, type(exc).__name__


def _provider_retry_time(exc: embeddings.ProviderUnavailable) -> datetime:
    if exc.retry_at is not None:
        return datetime.fromtimestamp(exc.retry_at, tz=UTC)
    return _storage_retry_time()


def _storage_retry_time() -> datetime:
    """One backoff step from now: a wait gives its attempt back, so it never grows."""
    delay = backoff_seconds(1, base=settings.RETRY_BASE_SECONDS, cap=settings.RETRY_MAX_SECONDS)
    return datetime.now(tz=UTC) + timedelta(seconds=max(delay, settings.RETRY_BASE_SECONDS))


def _fail_quietly(record: Callable[..., None], **kwargs: Any) -> None:
    """Record an outcome; if even that fails (lease lost, database gone) the sweeper requeues."""
    try:
        record(**kwargs)
    except LeaseLost:
        pass
    except Exception:
        logger.exception("could not record the task outcome")


def build_run(*, task: IngestionTask, lease: Lease) -> str:
    assert task.build_id is not None, "a build task always names its build"
    build = Build.objects.select_related("revision", "index_version", "document", "kb").get(
        pk=task.build_id
    )
    if build.state in (Build.State.LIVE, Build.State.SUPERSEDED, Build.State.FAILED):
        with fenced(lease):
            task_succeed(lease=lease)
        return "already_done"
    version = build.index_version
    revision = build.revision
    with fenced(lease):
        Build.objects.filter(pk=build.pk, state=Build.State.PENDING).update(
            state=Build.State.BUILDING
        )

    options = parse_options(kb=build.kb)
    with parse_context(build_id=build.pk, lease=lease, options=options):
        parsed = stage_run(
            lease=lease,
            stage=StageResult.Stage.PARSE,
            # Shared across builds of the same bytes read the same way: a parse made under
            # other options (the knowledge base's OCR mode, the server's switch) is not reused.
            fingerprint=fingerprint(
                revision.sha256,
                revision.media_type,
                settings.PARSE_MAX_CHARS,
                *([options.key] if options.key else []),
            ),
            compute=lambda: parse(revision),
            # The extracted text lives in derived storage; if it is gone (a restore without
            # it), parse again rather than fail the chunk stage.
            reusable=lambda parsed: storage.file_problem(parsed["text_path"]) is None,
            shared=True,
        )
    record_title(revision=revision, title=parsed.get("title", ""), lease=lease)
    with fenced(lease):
        # The text this build's chunk offsets count into (citations and search context read it).
        Build.objects.filter(pk=build.pk).exclude(text_path=parsed["text_path"]).update(
            text_path=parsed["text_path"]
        )
    chunked = stage_run(
        lease=lease,
        stage=StageResult.Stage.CHUNK,
        fingerprint=fingerprint(parsed["text_sha256"], version.chunk_size, version.chunk_overlap),
        compute=lambda: chunk(parsed["text_path"], version),
        shared=True,
    )
    pieces: list[JsonDict] = chunked["chunks"]
    english = english_expected(pieces, version)
    with fenced(lease):
        # Runs on every attempt; only a changed expectation invalidates an earlier verification.
        Build.objects.filter(pk=build.pk).exclude(
            expected_chunk_count=len(pieces),
            manifest_sha256=chunked["manifest"],
            english_expected=english,
        ).update(
            expected_chunk_count=len(pieces),
            manifest_sha256=chunked["manifest"],
            english_expected=english,
            verified_at=None,
        )
    if not pieces:
        raise TerminalError("empty", NOTHING_TO_INDEX())
    # The English list's model is part of what the stages make (a version's settings never
    # change, but a stage result is looked up by its input).
    embedded_by = (version.model, version.dimensions, *filter(None, [version.english_model]))
    stage_run(
        lease=lease,
        stage=StageResult.Stage.EMBED,
        fingerprint=fingerprint(chunked["manifest"], *embedded_by),
        compute=lambda: embed(pieces, version, build_id=build.pk, lease=lease),
    )
    stage_run(
        lease=lease,
        stage=StageResult.Stage.WRITE,
        fingerprint=fingerprint(chunked["manifest"], *embedded_by),
        compute=lambda: write(build=build, pieces=pieces, lease=lease),
    )
    faults.before_switch()
    return _switch(build_id=build.pk, lease=lease)


@retry_conflicts
def _switch(*, build_id: int, lease: Lease) -> str:
    """The switch and the task's success commit together, or neither does."""
    with transaction.atomic():
        result = build_publish(build_id=build_id, lease=lease)
        task_succeed(lease=lease)
    return result.outcome.value


def purge_run(*, task: IngestionTask, lease: Lease) -> str:
    assert task.document_id is not None, "a delete task always names its document"
    removed = document_purge(document_id=task.document_id, lease=lease)
    with fenced(lease):
        task_succeed(lease=lease)
    return f"purged {removed} chunks"
