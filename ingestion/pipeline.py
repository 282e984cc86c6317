"""Running one ingestion task: claim -> parse -> chunk -> embed -> write -> finalize (switch).

Each stage records a StageResult keyed by task + stage + input fingerprint + pipeline version and
reuses a succeeded one, so a redelivered or retried task redoes only unfinished work. No network
call and no file parsing happens inside a database transaction; every write that matters is
fenced by the task's lease (`work.leases.fenced`).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F
from django.db.models.functions import Now

import embeddings
from ingestion import writer
from ingestion.models import EmbeddingCache, StageResult
from ingestion.task_outcomes import (
    PROVIDER_UNAVAILABLE,
    task_fail,
    task_retry_later,
    task_succeed,
    task_wait_for_provider,
)
from kb import storage
from kb.ann_build import ann_index_after_build
from kb.completeness import IncompleteBuild, manifest_of
from kb.models import PIPELINE_VERSION, Build, Document, IndexVersion, Revision
from kb.services.documents import document_purge
from kb.services.publication import build_publish
from kb.transactions import retry_conflicts
from textkit import chunker
from textkit import extract as extractors
from work import faults
from work.backoff import backoff_seconds
from work.leases import Heartbeat, Lease, LeaseLost, fenced, task_claim
from work.models import IngestionTask

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]


class TerminalError(Exception):
    """Retrying cannot help (bad file, shape mismatch): the build fails with this message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


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
        _fail_quietly(task_wait_for_provider, lease=lease, until=until, message=str(exc))
        return PROVIDER_UNAVAILABLE
    except Exception as exc:
        if isinstance(exc, InterfaceError | OperationalError):
            # The connection may be dead (killed backend, failover): reconnect to record.
            connection.close()
        retryable, code = classify(exc)
        message = str(exc) if not retryable else f"{type(exc).__name__}: {exc}"
        if retryable:
            # Connection loss, serialization failure, deadlock, provider outage: try again later.
            logger.warning("task will be retried: %s", message, extra=log, exc_info=True)
            _fail_quietly(task_retry_later, lease=lease, code=code, message=message)
            return "retry"
        logger.warning("task failed: %s", message, extra=log)
        _fail_quietly(task_fail, lease=lease, code=code, message=message)
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


def _sha(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()


def build_run(*, task: IngestionTask, lease: Lease) -> str:
    assert task.build_id is not None, "a build task always names its build"
    build = Build.objects.select_related("revision", "index_version", "document").get(
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

    parsed = stage_run(
        lease=lease,
        stage=StageResult.Stage.PARSE,
        fingerprint=_sha(revision.sha256, revision.media_type, settings.PARSE_MAX_CHARS),
        compute=lambda: _parse(revision),
        # The extracted text lives in derived storage; if it is gone (a restore without it),
        # parse again rather than fail the chunk stage.
        reusable=lambda parsed: storage.file_problem(parsed["text_path"]) is None,
        shared=True,
    )
    _record_title(revision=revision, title=parsed.get("title", ""), lease=lease)
    chunked = stage_run(
        lease=lease,
        stage=StageResult.Stage.CHUNK,
        fingerprint=_sha(parsed["text_sha256"], version.chunk_size, version.chunk_overlap),
        compute=lambda: _chunk(parsed["text_path"], version),
        shared=True,
    )
    pieces: list[JsonDict] = chunked["chunks"]
    with fenced(lease):
        # Runs on every attempt; only a changed expectation invalidates an earlier verification.
        Build.objects.filter(pk=build.pk).exclude(
            expected_chunk_count=len(pieces), manifest_sha256=chunked["manifest"]
        ).update(
            expected_chunk_count=len(pieces), manifest_sha256=chunked["manifest"], verified_at=None
        )
    if not pieces:
        raise TerminalError("empty", "The document produced no text to index.")
    stage_run(
        lease=lease,
        stage=StageResult.Stage.EMBED,
        fingerprint=_sha(chunked["manifest"], version.model, version.dimensions),
        compute=lambda: _embed(pieces, version, build_id=build.pk, lease=lease),
    )
    stage_run(
        lease=lease,
        stage=StageResult.Stage.WRITE,
        fingerprint=_sha(chunked["manifest"], version.model, version.dimensions),
        compute=lambda: _write(build=build, pieces=pieces, lease=lease),
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


# --- stages --------------------------------------------------------------------------------


def _parse(revision: Revision) -> JsonDict:
    """Extract the file into derived storage as `Extracted.to_json` (title, headings, blocks).
    A source file that is missing or not the uploaded bytes fails the build, terminally (a
    retry cannot help until someone restores the file), with a reason a person can act on."""
    problem = storage.file_problem(
        revision.storage_path, size=revision.size, sha256=revision.sha256
    )
    if problem:
        raise TerminalError(
            "stored_file_missing",
            f"stored file {problem}: {revision.sha256}; restore storage from backup",
        )
    storage_path, media_type = revision.storage_path, revision.media_type
    faults.poison(storage.absolute_path(storage_path).read_bytes()[:1_000_000])
    try:
        extracted = extractors.extract(
            storage.absolute_path(storage_path), media_type, max_chars=settings.PARSE_MAX_CHARS
        )
    except extractors.ParseError as exc:
        raise TerminalError("unparseable", str(exc)) from exc
    stored = storage.store_bytes(extracted.to_json(), kind="derived")
    return {
        "text_path": stored.path,
        "text_sha256": stored.sha256,
        "chars": sum(len(block.text) for block in extracted.blocks),
        "title": extracted.title,
    }


def _record_title(*, revision: Revision, title: str, lease: Lease) -> None:
    """Write the revision's extracted title, and make it the document's title when the uploader
    gave none (the title is then the key). Fenced; idempotent: both are conditional UPDATEs
    that change nothing the second time, and a title the uploader gave is never replaced."""
    with fenced(lease):
        Revision.objects.filter(pk=revision.pk).exclude(extracted_title=title).update(
            extracted_title=title
        )
        if title:
            Document.objects.filter(pk=revision.document_id, title=F("key")).exclude(
                title=title
            ).update(title=title, updated_at=Now())


def _stored_blocks(text_path: str) -> list[extractors.Block]:
    """The blocks the parse stage stored; a plain-text file (what parse stored before it kept
    headings) is one paragraph block."""
    content = storage.read_text(text_path)
    try:
        return extractors.Extracted.from_json(content).blocks
    except ValueError:
        return [extractors.Block(extractors.PARAGRAPH, content)]


def _chunk(text_path: str, version: IndexVersion) -> JsonDict:
    pieces = chunker.chunk_blocks(
        _stored_blocks(text_path), size=version.chunk_size, overlap=version.chunk_overlap
    )
    return {
        "chunks": [
            {
                "ordinal": p.ordinal,
                "text": p.text,
                "heading_path": p.heading_path,
                "content_hash": p.content_hash,
                "token_count": p.token_count,
            }
            for p in pieces
        ],
        "manifest": manifest_of([p.content_hash for p in pieces]),
    }


def _vector_literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


def cache_model(version: IndexVersion) -> str:
    """The EmbeddingCache's model key for an index version. Other providers' vectors are kept
    apart from the hash provider's (and from each other's) even under the same model name, so a
    vector from one provider can never be written into an index version of another."""
    if version.provider == embeddings.HASH_PROVIDER:
        return version.model
    return f"{version.provider}:{version.model}"[:200]


def _embed(
    pieces: list[JsonDict], version: IndexVersion, *, build_id: int, lease: Lease
) -> JsonDict:
    """Embed the texts not yet in the EmbeddingCache, in batches, outside any transaction.

    Each batch is cached as soon as it is embedded, so a task that waits for the provider halfway
    resumes where it stopped. ProviderUnavailable (breaker open, retries spent) propagates to
    `task_execute`; a wrong count or dimension is EmbeddingShapeError, terminal.

    `Build.chunks_embedded` (the admin's progress) is set, fenced, once the cached vectors are
    known and after each batch: it counts chunks, not texts, since chunks with the same content
    share one vector, and reaches `len(pieces)` when the last batch is cached."""
    provider = embeddings.get_provider(
        provider=version.provider, model=version.model, dimensions=version.dimensions
    )
    model_key = cache_model(version)
    # The content hash is the hash of this input (chunker.embedding_input), so the cache holds
    # one vector per text as embedded, heading path included.
    by_hash = {
        p["content_hash"]: chunker.embedding_input(p.get("heading_path", ""), p["text"])
        for p in pieces
    }
    cached = set(
        EmbeddingCache.objects.filter(
            model=model_key, dimensions=version.dimensions, content_hash__in=list(by_hash)
        ).values_list("content_hash", flat=True)
    )
    missing = [h for h in by_hash if h not in cached]
    chunks_per_hash = Counter(p["content_hash"] for p in pieces)
    with_vectors = sum(chunks_per_hash[h] for h in cached)
    _record_embedded(build_id=build_id, chunks=with_vectors, lease=lease)
    batch_size = settings.EMBEDDING_BATCH_SIZE
    for start in range(0, len(missing), batch_size):
        hashes = missing[start : start + batch_size]
        vectors = provider.embed([by_hash[h] for h in hashes])
        embeddings.check_shape(vectors, expected_count=len(hashes), dimensions=version.dimensions)
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO ingestion_embeddingcache
                       (model, dimensions, content_hash, embedding, created_at)
                SELECT %s, %s, h, v::vector, now()
                FROM unnest(%s::text[], %s::text[]) AS x(h, v)
                ON CONFLICT (model, dimensions, content_hash) DO NOTHING
                """,
                [model_key, version.dimensions, hashes, [_vector_literal(v) for v in vectors]],
            )
        with_vectors += sum(chunks_per_hash[h] for h in hashes)
        _record_embedded(build_id=build_id, chunks=with_vectors, lease=lease)
    return {"embedded": len(missing), "cached": len(cached)}


def _record_embedded(*, build_id: int, chunks: int, lease: Lease) -> None:
    """Fenced: a worker that lost its lease must not move another worker's progress."""
    with fenced(lease):
        Build.objects.filter(pk=build_id).update(chunks_embedded=chunks)


def chunk_key(
    *, document_id: int, index_version_id: int, revision: int, ordinal: int, content_hash: str
) -> str:
    """Stable across retries of the same build, unique across builds."""
    return _sha(document_id, index_version_id, revision, ordinal, content_hash)


def _write(*, build: Build, pieces: list[JsonDict], lease: Lease) -> JsonDict:
    """Chunk rows, postings and statistics, then the build's verification (`ingestion.writer`)."""
    return writer.chunks_write(
        build=build,
        pieces=pieces,
        lease=lease,
        chunk_key=chunk_key,
        model_key=cache_model(build.index_version),
    )
