"""B8's corpus through Canon's real path (upload service, outbox, relay, a real Celery worker,
switch) in a database of its own, and the live chunks every contender then gets."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import common
from bench.quality.corpus import Corpus

DB_NAME = "canon_quality"


REDIS_DB = 2


KB_SLUG = "quality"


EXTENSIONS = {
    "text/html": ".html",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
}


def setup(db_name: str, redis_db: int, *, fresh: bool = True) -> None:
    """common.setup() on a database and Redis db of B8's own (so runs of B1..B7 in
    `canon_bench` and the dev stack's Redis db 0 are never touched); `fresh=False` keeps the
    database of an earlier run (`--reuse`)."""
    os.environ["REDIS_URL"] = common.redis_url(redis_db)
    common.DB_NAME = db_name  # setup() creates, drops and migrates exactly this database
    common.setup(fresh=fresh)


def principal_for(kb: Any) -> Any:
    from retrieval.principals import Principal

    return Principal(
        tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
    )


def upload_name(doc: dict[str, Any]) -> str:
    """The file name the upload carries: the key's last part, with an extension for its media
    type when it has none Canon recognises."""
    name = Path(doc["key"]).name
    suffix = EXTENSIONS.get(doc.get("media_type", ""), "")
    if suffix and not name.lower().endswith((*EXTENSIONS.values(), ".htm", ".text")):
        name += suffix
    return name


def ingest(
    corpus: Corpus, kb: Any, *, timeout: float, worker_alive: Callable[[], bool]
) -> dict[str, Any]:
    """Upload every document through the API's upload service and wait (running the relay, as
    beat would) until each one is live or failed. The caller runs the worker."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from ingestion.relay import outbox_relay_batch
    from kb.models import Build, Chunk, Document, Publication
    from kb.uploads import UploadRejected
    from retrieval.api.uploads import Refused, document_upload

    principal = principal_for(kb)
    rejected: dict[str, str] = {}
    started = time.perf_counter()
    for i, doc in enumerate(corpus.documents):
        data = (corpus.directory / doc["key"]).read_bytes()
        try:
            document_upload(
                principal=principal,
                kb=kb,
                idempotency_key=f"b8-{i}",
                key=doc["key"],
                upload=SimpleUploadedFile(upload_name(doc), data),
                title=doc["key"],
            )
        except (UploadRejected, Refused) as exc:
            rejected[doc["key"]] = f"upload refused: {exc}"
    uploaded_s = time.perf_counter() - started
    open_states = [Build.State.PENDING, Build.State.BUILDING]
    deadline = time.monotonic() + timeout
    last_print = 0.0
    while True:
        outbox_relay_batch()
        counts = dict.fromkeys(Build.State.values, 0)
        for state in Build.objects.filter(kb=kb).values_list("state", flat=True):
            counts[state] += 1
        waiting = counts[Build.State.PENDING] + counts[Build.State.BUILDING]
        if time.monotonic() - last_print > 15:
            print(f"[B8] builds: {counts}", flush=True)
            last_print = time.monotonic()
        if not waiting or time.monotonic() > deadline:
            break
        if not worker_alive():
            raise RuntimeError(f"the worker died; see {common.ROOT / '.data'}/bench-worker-*.log")
        time.sleep(0.1)
    settled_s = time.perf_counter() - started
    version = kb.active_index_version
    failures = dict(rejected)
    for key, state, error in Build.objects.filter(kb=kb).values_list(
        "document__key", "state", "error"
    ):
        if state == Build.State.FAILED:
            failures[key] = error or "failed (no reason recorded)"
        elif state in open_states:
            failures[key] = f"still {state} after {timeout:.0f}s"
    live = Publication.objects.filter(kb=kb, index_version=version).count()
    chunks = Chunk.objects.filter(
        kb=kb,
        index_version=version,
        build__in=Publication.objects.filter(kb=kb, index_version=version).values("build"),
    ).count()
    return {
        "documents": len(corpus.documents),
        "uploaded": Document.objects.filter(kb=kb).count(),
        "live": live,
        "failed": len(failures),
        "failures": failures,
        "chunks": chunks,
        "upload_s": round(uploaded_s, 2),
        "ingest_s": round(settled_s, 2),
        "chunks_per_s": round(chunks / settled_s, 1) if settled_s else None,
        "build_states": {k: v for k, v in counts.items() if v},
    }


@dataclass
class Chunks:
    ids: list[int]
    keys: list[str]
    texts: list[str]
    vectors: Any  # numpy float32 (n, dims), as stored


def live_chunks(kb: Any) -> Chunks:
    import numpy as np
    import psycopg
    from pgvector.psycopg import register_vector

    iv = kb.active_index_version_id
    with psycopg.connect(common.database_url()) as conn:
        register_vector(conn)
        rows = conn.execute(
            """
            SELECT c.id, d.key, c.text, c.embedding
            FROM kb_chunk c
            JOIN kb_publication p ON p.build_id = c.build_id AND p.index_version_id = %(iv)s
            JOIN kb_document d ON d.id = p.document_id
            WHERE c.index_version_id = %(iv)s AND c.kb_id = %(kb)s AND d.deleted_at IS NULL
            ORDER BY c.id
            """,
            {"iv": iv, "kb": kb.pk},
        ).fetchall()
    vectors = (
        np.stack([np.asarray(_floats(r[3]), dtype=np.float32) for r in rows])
        if rows
        else np.zeros((0, 1), dtype=np.float32)
    )
    return Chunks(
        ids=[r[0] for r in rows],
        keys=[r[1] for r in rows],
        texts=[r[2] for r in rows],
        vectors=vectors,
    )


def _floats(value: Any) -> Any:
    """A stored embedding as floats (pgvector's adapter gives a Vector for the untyped column)."""
    return value.to_numpy() if hasattr(value, "to_numpy") else value


def settled_summary(corpus: Corpus, kb: Any) -> dict[str, Any]:
    """The ingest figures of a knowledge base ingested by an earlier run (`--reuse`): what is
    live now, no timings."""
    from kb.models import Build, Chunk, Publication

    version = kb.active_index_version
    failures = {
        key: error or "failed (no reason recorded)"
        for key, error in Build.objects.filter(kb=kb, state=Build.State.FAILED).values_list(
            "document__key", "error"
        )
    }
    live = Publication.objects.filter(kb=kb, index_version=version)
    return {
        "documents": len(corpus.documents),
        "live": live.count(),
        "failed": len(failures),
        "failures": failures,
        "chunks": Chunk.objects.filter(
            kb=kb, index_version=version, build__in=live.values("build")
        ).count(),
        "reused": True,
        "ingest_s": None,
        "chunks_per_s": None,
    }
