"""The embed stage: each chunk's vector from the version's provider, unchanged text served from
the embedding cache, so a one-paragraph edit re-embeds one chunk."""

from __future__ import annotations

from collections import Counter

from django.conf import settings
from django.db import connection

import embeddings
from ingestion.models import EmbeddingCache
from ingestion.pipeline.stages import JsonDict
from kb.models import Build, IndexVersion
from textkit import chunker
from work.leases import Lease, fenced


def vector_literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


def cache_model(version: IndexVersion) -> str:
    """The EmbeddingCache's model key for an index version. Other providers' vectors are kept
    apart from the hash provider's (and from each other's) even under the same model name, so a
    vector from one provider can never be written into an index version of another."""
    if version.provider == embeddings.HASH_PROVIDER:
        return version.model
    return f"{version.provider}:{version.model}"[:200]


def embed(
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
    record_embedded(build_id=build_id, chunks=with_vectors, lease=lease)
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
                [model_key, version.dimensions, hashes, [vector_literal(v) for v in vectors]],
            )
        with_vectors += sum(chunks_per_hash[h] for h in hashes)
        record_embedded(build_id=build_id, chunks=with_vectors, lease=lease)
    return {"embedded": len(missing), "cached": len(cached)}


def record_embedded(*, build_id: int, chunks: int, lease: Lease) -> None:
    """Fenced: a worker that lost its lease must not move another worker's progress."""
    with fenced(lease):
        Build.objects.filter(pk=build_id).update(chunks_embedded=chunks)
