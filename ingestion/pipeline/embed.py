"""The embed stage: each chunk's vector from the version's provider (and, for a version with an
English list, the English vector of each chunk not in Chinese), unchanged text served from the
embedding cache, so a one-paragraph edit re-embeds one chunk."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

import embeddings
from ingestion.models import EmbeddingCache
from ingestion.pipeline.stages import JsonDict
from kb.models import Build, IndexVersion
from textkit import chunker
from textkit.text import mostly_chinese
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


def english_model_key(version: IndexVersion) -> str:
    """The EmbeddingCache's model key for a version's English list ("minilm:<model>")."""
    return f"{version.english_provider}:{version.english_model}"[:200]


def english_hash(piece: JsonDict) -> str | None:
    """The cache key of a chunk's English vector (the hash of its text, which is what the
    English list embeds: no heading path, as B8 measured it), or None for a chunk in Chinese,
    which gets none."""
    text = piece["text"]
    if mostly_chinese(text):
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def english_expected(pieces: list[JsonDict], version: IndexVersion) -> int | None:
    """How many of `pieces` must carry an English vector (None: the version has no list)."""
    if not version.english_list:
        return None
    return sum(english_hash(p) is not None for p in pieces)


@dataclass(frozen=True, eq=False)  # one space is one object: hashed by identity
class _Space:
    """One vector space the stage fills: its provider, cache key and dimensions, and each
    chunk's input by content hash."""

    provider: embeddings.EmbeddingProvider
    model_key: str
    dimensions: int
    inputs: dict[str, str]

    def missing(self) -> set[str]:
        cached = set(
            EmbeddingCache.objects.filter(
                model=self.model_key,
                dimensions=self.dimensions,
                content_hash__in=list(self.inputs),
            ).values_list("content_hash", flat=True)
        )
        return set(self.inputs) - cached

    def fill(self, hashes: list[str]) -> None:
        """Embed these inputs and cache their vectors (a redelivered batch writes nothing)."""
        vectors = self.provider.embed([self.inputs[h] for h in hashes])
        embeddings.check_shape(vectors, expected_count=len(hashes), dimensions=self.dimensions)
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO ingestion_embeddingcache
                       (model, dimensions, content_hash, embedding, created_at)
                SELECT %s, %s, h, v::vector, now()
                FROM unnest(%s::text[], %s::text[]) AS x(h, v)
                ON CONFLICT (model, dimensions, content_hash) DO NOTHING
                """,
                [self.model_key, self.dimensions, hashes, [vector_literal(v) for v in vectors]],
            )


def embed(
    pieces: list[JsonDict], version: IndexVersion, *, build_id: int, lease: Lease
) -> JsonDict:
    """Embed the texts not yet in the EmbeddingCache, in batches, outside any transaction: each
    chunk's vector, and for a version with an English list (`IndexVersion.english_list`) the
    English vector of each chunk not in Chinese (`english_hash`).

    Each batch is cached as soon as it is embedded, so a task that waits for the provider halfway
    resumes where it stopped. ProviderUnavailable (breaker open, retries spent) propagates to
    `task_execute`; a wrong count or dimension is EmbeddingShapeError, terminal.

    `Build.chunks_embedded` (the admin's progress) is set, fenced, once the cached vectors are
    known and after each window of chunks: it counts chunks that have every vector they need
    (chunks with the same content share them), and reaches `len(pieces)` when the last is
    cached. The chunks still missing a vector go in windows of EMBEDDING_BATCH_SIZE, each
    space's missing inputs of a window in one call, so the bar moves while the slower English
    model works."""
    main = _Space(
        provider=embeddings.get_provider(
            provider=version.provider, model=version.model, dimensions=version.dimensions
        ),
        model_key=cache_model(version),
        dimensions=version.dimensions,
        # The content hash is the hash of this input (chunker.embedding_input), so the cache
        # holds one vector per text as embedded, heading path included.
        inputs={
            p["content_hash"]: chunker.embedding_input(p.get("heading_path", ""), p["text"])
            for p in pieces
        },
    )
    needs: list[list[tuple[_Space, str]]] = [[(main, p["content_hash"])] for p in pieces]
    english: _Space | None = None
    if version.english_list:
        hashes = [english_hash(p) for p in pieces]
        english = _Space(
            provider=embeddings.get_provider(
                provider=version.english_provider,
                model=version.english_model,
                dimensions=int(version.english_dimensions or 0),
            ),
            model_key=english_model_key(version),
            dimensions=int(version.english_dimensions or 0),
            inputs={h: p["text"] for h, p in zip(hashes, pieces, strict=True) if h is not None},
        )
        for need, h in zip(needs, hashes, strict=True):
            if h is not None:
                need.append((english, h))
    spaces = [main] if english is None else [main, english]
    missing = {space: space.missing() for space in spaces}
    counts = {space: len(missing[space]) for space in spaces}

    def done() -> int:
        return sum(all(h not in missing[sp] for sp, h in need) for need in needs)

    record_embedded(build_id=build_id, chunks=done(), lease=lease)
    batch_size = settings.EMBEDDING_BATCH_SIZE
    # Only the chunks still missing a vector, so each call carries up to a whole batch.
    pending = [need for need in needs if any(h in missing[sp] for sp, h in need)]
    for start in range(0, len(pending), batch_size):
        window = pending[start : start + batch_size]
        for space in spaces:
            todo = list(dict.fromkeys(h for need in window for sp, h in need if sp is space))
            todo = [h for h in todo if h in missing[space]]
            if todo:
                space.fill(todo)
                missing[space].difference_update(todo)
        record_embedded(build_id=build_id, chunks=done(), lease=lease)
    out: JsonDict = {"embedded": counts[main], "cached": len(main.inputs) - counts[main]}
    if english is not None:
        out["english_embedded"] = counts[english]
        out["english_cached"] = len(english.inputs) - counts[english]
    return out


def record_embedded(*, build_id: int, chunks: int, lease: Lease) -> None:
    """Fenced: a worker that lost its lease must not move another worker's progress."""
    with fenced(lease):
        Build.objects.filter(pk=build_id).update(chunks_embedded=chunks)
