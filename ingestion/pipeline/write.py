"""The write stage: a build's chunk rows, their keyword postings and statistics, then the one
completeness check of the build.

Everything here is fenced by the task's lease (`work.leases.fenced`) and idempotent: chunk
rows are upserted on (build, ordinal), a batch's postings are replaced whole, and the build's
lexical statistics are replaced whole, so a retried or redelivered write stage converges to the
same rows.

Postings are copied, not analysed, when another build already holds them for the same chunks
(`postings_source`): a re-index into a new index version (an embedding-model change) keeps the
revision and the chunker, so each chunk's postings, length and the build's statistics are the
same rows under a new chunk id — one statement on the server instead of the analysis in Python
and a COPY of ~80 rows a chunk. It takes no lock on the source: see `_SOURCE`. Analysis is a
function of the pipeline version, so a changed analyser must come with a new
`kb.models.PIPELINE_VERSION`.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models.functions import Now

from ingestion.pipeline.chunk import chunk_key
from ingestion.pipeline.embed import cache_model, english_hash, english_model_key
from ingestion.pipeline.stages import JsonDict
from kb.completeness import build_completeness, incomplete_build
from kb.models import Build
from textkit import analysis, text
from work import faults
from work.leases import Lease, fenced


def keyword_text(piece: JsonDict) -> str:
    """What the keyword index reads of a chunk: its heading path, then its text."""
    heading = piece.get("heading_path") or ""
    return f"{heading}\n{piece['text']}" if heading else piece["text"]


def chunks_write(
    *, build: Build, pieces: list[JsonDict], lease: Lease, chunk_key: Any, model_key: str
) -> JsonDict:
    """Upsert the build's chunk rows in fenced batches, joining cached embeddings (the English
    list's too, for a version that has one: `embed.english_hash`); for postings
    versions also each batch's postings (copied from `postings_source` when there is one, else
    analysed); then the build's statistics and its verification."""
    version = build.index_version
    postings = version.uses_postings
    source = postings_source(build) if postings else None
    copied = 0
    batch_size = settings.CHUNK_WRITE_BATCH
    batches = 0
    for start in range(0, len(pieces), batch_size):
        batch = pieces[start : start + batch_size]
        write = functools.partial(
            _batch_write,
            build=build,
            batch=batch,
            lease=lease,
            chunk_key=chunk_key,
            model_key=model_key,
            chunks_written=start + len(batch),
            postings=postings,
        )
        try:
            write(source=source)
            copied += source is not None
        except _SourceGone:
            source = None  # given up since it was chosen: analyse this batch and the rest
            write(source=None)
        batches += 1
        faults.after_chunk_batch(batches)
    # A source still set here gave every batch: its statistics are this build's.
    copied_all = source is not None and _statistics_copy(build=build, source=source, lease=lease)
    if postings and not copied_all:
        _statistics_replace(build=build, lease=lease)
    build_verify(build=build, lease=lease)
    return {"batches": batches, "chunks": len(pieces), "postings_copied_batches": copied}


class _SourceGone(Exception):
    """The postings source was given up since it was chosen: the batch is rolled back."""


def postings_source(build: Build) -> int | None:
    """Another build whose chunks are this build's chunks, postings included: the same
    revision chunked into the same pieces (manifest) under the same pipeline version, verified
    and not collected. Its postings, lengths and statistics are this build's."""
    build.refresh_from_db(fields=["manifest_sha256", "expected_chunk_count"])
    if not build.manifest_sha256:
        return None
    return (
        Build.objects.filter(
            revision_id=build.revision_id,
            manifest_sha256=build.manifest_sha256,
            expected_chunk_count=build.expected_chunk_count,
            index_version__pipeline_version=build.index_version.pipeline_version,
            verified_at__isnull=False,
            collected_at__isnull=True,
        )
        .exclude(pk=build.pk)
        .order_by("-pk")
        .values_list("pk", flat=True)
        .first()
    )


def _batch_write(
    *,
    build: Build,
    batch: list[JsonDict],
    lease: Lease,
    chunk_key: Any,
    model_key: str,
    chunks_written: int,
    postings: bool,
    source: int | None,
) -> None:
    """One fenced transaction: the batch's chunk rows, and (postings versions) their postings,
    copied from `source` or analysed here."""
    version = build.index_version
    analysed = (
        [analysis.term_frequencies(keyword_text(p)) for p in batch]
        if postings and source is None
        else []
    )
    with fenced(lease), connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO kb_chunk (kb_id, build_id, document_id, index_version_id, ordinal,
                                  chunk_key, text, heading_path, content_hash, token_count,
                                  embedding, embedding_en, lexical, lexical_length, char_start,
                                  char_end, location, created_at)
            SELECT %s, %s, %s, %s, x.ordinal, x.chunk_key, x.text, x.heading_path,
                   x.content_hash, x.token_count, ec.embedding, en.embedding,
                   CASE WHEN %s THEN to_tsvector('simple', x.lexical) END, x.lexical_length,
                   x.char_start, x.char_end, x.location::jsonb, now()
            FROM unnest(%s::int[], %s::text[], %s::text[], %s::text[], %s::text[], %s::int[],
                        %s::text[], %s::int[], %s::int[], %s::int[], %s::text[], %s::text[])
                 AS x(ordinal, chunk_key, text, heading_path, content_hash, token_count,
                      lexical, lexical_length, char_start, char_end, location, en_hash)
            LEFT JOIN ingestion_embeddingcache ec
                   ON ec.model = %s AND ec.dimensions = %s AND ec.content_hash = x.content_hash
            LEFT JOIN ingestion_embeddingcache en
                   ON en.model = %s AND en.dimensions = %s AND en.content_hash = x.en_hash
            ON CONFLICT (build_id, ordinal) DO UPDATE
               SET chunk_key = EXCLUDED.chunk_key, text = EXCLUDED.text,
                   heading_path = EXCLUDED.heading_path,
                   content_hash = EXCLUDED.content_hash, token_count = EXCLUDED.token_count,
                   embedding = EXCLUDED.embedding, embedding_en = EXCLUDED.embedding_en,
                   lexical = EXCLUDED.lexical,
                   lexical_length = EXCLUDED.lexical_length,
                   char_start = EXCLUDED.char_start, char_end = EXCLUDED.char_end,
                   location = EXCLUDED.location
            RETURNING id, ordinal, xmax = 0 AS inserted
            """,
            [
                build.kb_id,
                build.pk,
                build.document_id,
                build.index_version_id,
                not postings,
                [p["ordinal"] for p in batch],
                [
                    chunk_key(
                        document_id=build.document_id,
                        index_version_id=build.index_version_id,
                        revision=build.revision.number,
                        ordinal=p["ordinal"],
                        content_hash=p["content_hash"],
                    )
                    for p in batch
                ],
                [p["text"] for p in batch],
                [p.get("heading_path", "") for p in batch],
                [p["content_hash"] for p in batch],
                [p["token_count"] for p in batch],
                [None if postings else text.lexical_document(p["text"]) for p in batch],
                [length for _, length in analysed] if analysed else [None] * len(batch),
                # Chunk results stored before positions were kept have none.
                [p.get("char_start") for p in batch],
                [p.get("char_end") for p in batch],
                [json.dumps(p["location"]) if p.get("location") else None for p in batch],
                [english_hash(p) if version.english_list else None for p in batch],
                model_key,
                version.dimensions,
                english_model_key(version),
                version.english_dimensions or 0,
            ],
        )
        rows = cursor.fetchall()
        ids_by_ordinal = {ordinal: chunk_id for chunk_id, ordinal, _ in rows}
        chunk_ids = [ids_by_ordinal[p["ordinal"]] for p in batch]
        if postings and not all(inserted for _, _, inserted in rows):
            # A retried batch may have written postings of its rows; rows just inserted have none.
            cursor.execute("DELETE FROM kb_posting WHERE chunk_id = ANY(%s)", [chunk_ids])
        if source is not None:
            _postings_copy(cursor, version_id=version.pk, chunk_ids=chunk_ids, source=source)
        elif postings:
            _postings_replace(cursor, version_id=version.pk, chunk_ids=chunk_ids, analysed=analysed)
        Build.objects.filter(pk=build.pk).update(chunks_written=chunks_written, verified_at=None)


# The source is read in the statement's one snapshot, through a build that is verified and not
# given up in it: retention and purge give a build up (`collected_at`) in a transaction before
# the ones that delete its chunks, so a snapshot that still sees it uncollected sees all of them.
_SOURCE = (
    "JOIN kb_build s ON s.id = %(source)s AND s.collected_at IS NULL AND s.verified_at IS NOT NULL"
)


def _postings_copy(cursor: Any, *, version_id: int, chunk_ids: list[int], source: int) -> None:
    """These chunks' postings and lengths are the source build's chunks' (same ordinal, same
    content), written on the server in one statement; _SourceGone (the batch's transaction is
    rolled back) unless every chunk found its source."""
    cursor.execute(
        f"""
        WITH pairs AS (
            SELECT n.id AS chunk, o.id AS source_chunk, o.lexical_length
            FROM kb_chunk n
            JOIN kb_chunk o ON o.build_id = %(source)s AND o.ordinal = n.ordinal
                           AND o.content_hash = n.content_hash
            {_SOURCE}
            WHERE n.id = ANY(%(chunks)s)
        ), lengths AS (
            UPDATE kb_chunk c SET lexical_length = pairs.lexical_length
            FROM pairs WHERE c.id = pairs.chunk
        ), postings AS (
            INSERT INTO kb_posting (chunk_id, index_version_id, term, tf, impact)
            SELECT pairs.chunk, %(version)s, p.term, p.tf, p.impact
            FROM pairs JOIN kb_posting p ON p.chunk_id = pairs.source_chunk
        )
        SELECT count(*) FROM pairs
        """,  # noqa: S608 (a constant fragment; values are bound)
        {"source": source, "chunks": chunk_ids, "version": version_id},
    )
    row = cursor.fetchone()
    if not row or row[0] != len(chunk_ids):
        raise _SourceGone(source)


def _postings_replace(
    cursor: Any,
    *,
    version_id: int,
    chunk_ids: list[int],
    analysed: list[tuple[dict[str, int], int]],
) -> None:
    """Write the postings of these chunks (they have none: `_batch_write` deleted a retried
    batch's). Binary COPY: a chunk has ~80 postings, and adapting them as query parameters cost
    more than writing them."""
    raw = cursor.cursor  # psycopg's own cursor under Django's wrapper
    with raw.copy(
        "COPY kb_posting (chunk_id, index_version_id, term, tf, impact) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["int8", "int8", "text", "int2", "float8"])
        for chunk_id, (frequencies, length) in zip(chunk_ids, analysed, strict=True):
            for term, tf in frequencies.items():
                copy.write_row(
                    (chunk_id, version_id, term, min(tf, 32767), analysis.impact(tf, length))
                )


def _statistics_copy(*, build: Build, source: int, lease: Lease) -> bool:
    """The build's statistics are the source's (same chunks, same postings); False when the
    source is gone (given up since) and they must be computed."""
    with fenced(lease), connection.cursor() as cursor:
        cursor.execute("DELETE FROM kb_lexicalstat WHERE build_id = %s", [build.pk])
        cursor.execute(
            f"""
            INSERT INTO kb_lexicalstat (build_id, index_version_id, term, chunks, length)
            SELECT %(build)s, %(version)s, l.term, l.chunks, l.length
            FROM kb_lexicalstat l {_SOURCE}
            WHERE l.build_id = %(source)s
            """,  # noqa: S608 (a constant fragment; values are bound)
            {"build": build.pk, "version": build.index_version_id, "source": source},
        )
        copied = cursor.rowcount > 0  # a build's statistics always hold its '' row
    return copied


def _statistics_replace(*, build: Build, lease: Lease) -> None:
    """The build's share of the version's BM25 statistics, recomputed from its postings."""
    with fenced(lease), connection.cursor() as cursor:
        cursor.execute("DELETE FROM kb_lexicalstat WHERE build_id = %s", [build.pk])
        cursor.execute(
            """
            INSERT INTO kb_lexicalstat (build_id, index_version_id, term, chunks, length)
            SELECT %(build)s, %(iv)s, p.term, count(*), 0
            FROM kb_posting p JOIN kb_chunk c ON c.id = p.chunk_id
            WHERE c.build_id = %(build)s
            GROUP BY p.term
            UNION ALL
            SELECT %(build)s, %(iv)s, '', count(*), coalesce(sum(c.lexical_length), 0)
            FROM kb_chunk c WHERE c.build_id = %(build)s
            """,
            {"build": build.pk, "iv": build.index_version_id},
        )


def build_verify(*, build: Build, lease: Lease) -> None:
    """Check every written chunk against the build's expectations and record that they passed.

    This is the one O(n) completeness check of a build, done here so that the switch, which
    holds the document lock, reads only the build row. Fenced, so it cannot interleave with a
    write of another attempt; raises IncompleteBuild (terminal) when the rows do not match.
    """
    with fenced(lease):
        row = Build.objects.select_related("index_version").get(pk=build.pk)
        problems = build_completeness(build_id=build.pk).problems(
            expected_count=row.expected_chunk_count,
            dimensions=row.index_version.dimensions,
            manifest=row.manifest_sha256,
            english_expected=row.english_expected,
            english_dimensions=row.index_version.english_dimensions,
        )
        if problems:
            raise incomplete_build(build.pk, problems)
        Build.objects.filter(pk=build.pk).update(verified_at=Now())


def write(*, build: Build, pieces: list[JsonDict], lease: Lease) -> JsonDict:
    """The write stage: chunk rows, postings and statistics, then the build's verification."""
    return chunks_write(
        build=build,
        pieces=pieces,
        lease=lease,
        chunk_key=chunk_key,
        model_key=cache_model(build.index_version),
    )
