"""Whole-database invariant checks behind `manage.py kb_verify`. Reads only (the database, and
the stored files' sizes).

Each check is one SQL statement over the whole database (this is an audit, not a hot path); the
reconciler does the bounded, incremental version of the same work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection

from kb import storage
from kb.selectors import Completeness


@dataclass(frozen=True)
class Violation:
    check: str
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.subject}: {self.detail}"


def _rows(sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _active_index_versions() -> list[Violation]:
    found = [
        Violation("active-index-version", f"kb {kb_id}", detail)
        for kb_id, detail in _rows(
            """
            SELECT k.id, CASE WHEN iv.id IS NULL THEN 'has no active index version'
                              WHEN iv.kb_id <> k.id THEN 'points at a version of another kb'
                              ELSE 'points at version ' || iv.number || ' in state ' || iv.state END
            FROM kb_knowledgebase k
            LEFT JOIN kb_indexversion iv ON iv.id = k.active_index_version_id
            WHERE iv.id IS NULL OR iv.kb_id <> k.id OR iv.state <> 'active'
            """
        )
    ]
    found += [
        Violation("active-index-version", f"kb {kb_id}", f"{n} index versions are active")
        for kb_id, n in _rows(
            "SELECT kb_id, count(*) FROM kb_indexversion WHERE state = 'active' "
            "GROUP BY kb_id HAVING count(*) > 1"
        )
    ]
    return found


def _publications() -> list[Violation]:
    found = [
        Violation("pointer", f"publication {pub_id}", detail)
        for pub_id, detail in _rows(
            """
            SELECT p.id, 'points at build ' || b.id || ' (' || b.state || ') of document '
                         || b.document_id || ', index version ' || b.index_version_id
            FROM kb_publication p JOIN kb_build b ON b.id = p.build_id
            WHERE b.document_id <> p.document_id OR b.index_version_id <> p.index_version_id
               OR b.kb_id <> p.kb_id OR b.state <> 'live'
            """
        )
    ]
    found += [
        Violation("pointer", f"build {build_id}", "is live but no publication points at it")
        for (build_id,) in _rows(
            """
            SELECT b.id FROM kb_build b
            WHERE b.state = 'live'
              AND NOT EXISTS (SELECT 1 FROM kb_publication p WHERE p.build_id = b.id)
            """
        )
    ]
    for row in _rows(
        """
        SELECT b.id, b.expected_chunk_count, iv.dimensions, b.manifest_sha256,
               count(c.id), count(c.embedding), count(DISTINCT c.ordinal),
               min(c.ordinal), max(c.ordinal),
               min(vector_dims(c.embedding)), max(vector_dims(c.embedding)),
               encode(sha256(convert_to(coalesce(
                   string_agg(c.content_hash, ',' ORDER BY c.ordinal), ''), 'UTF8')), 'hex')
        FROM kb_publication p
        JOIN kb_build b ON b.id = p.build_id
        JOIN kb_indexversion iv ON iv.id = b.index_version_id
        LEFT JOIN kb_chunk c ON c.build_id = b.id
        GROUP BY b.id, iv.dimensions
        """
    ):
        build_id, expected, dimensions, manifest = row[:4]
        problems = Completeness(*row[4:]).problems(
            expected_count=expected, dimensions=dimensions, manifest=manifest
        )
        if not expected:
            problems.append("the live build has no chunks")
        found += [Violation("live-build-complete", f"build {build_id}", p) for p in problems]
    return found


def _chunks() -> list[Violation]:
    found = [
        Violation("deleted-document", f"document {doc_id}", f"purged but {n} chunks remain")
        for doc_id, n in _rows(
            """
            SELECT d.id, count(c.id) FROM kb_document d JOIN kb_chunk c ON c.document_id = d.id
            WHERE d.purged_at IS NOT NULL GROUP BY d.id
            """
        )
    ]
    found += [
        Violation("chunk-identity", f"build {build_id}", f"{n} chunks disagree with their build")
        for build_id, n in _rows(
            """
            SELECT c.build_id, count(*) FROM kb_chunk c JOIN kb_build b ON b.id = c.build_id
            WHERE c.document_id <> b.document_id OR c.index_version_id <> b.index_version_id
               OR c.kb_id <> b.kb_id
            GROUP BY c.build_id
            """
        )
    ]
    found += [
        Violation("duplicate-ordinal", f"build {build_id}", f"ordinal {ordinal} appears {n} times")
        for build_id, ordinal, n in _rows(
            "SELECT build_id, ordinal, count(*) FROM kb_chunk GROUP BY 1, 2 HAVING count(*) > 1"
        )
    ]
    return found


def _keyword_index() -> list[Violation]:
    """Every live build of a postings version (pipeline p2 on) is in the keyword index: each
    chunk has postings and a length, and the build's statistics count its chunks."""
    return [
        Violation("keyword-index", f"build {build_id}", detail)
        for build_id, detail in _rows(
            """
            SELECT b.id,
                   CASE WHEN s.chunks IS NULL THEN 'has no BM25 statistics'
                        WHEN s.chunks <> x.chunks THEN 'statistics count ' || s.chunks
                             || ' chunks, the build has ' || x.chunks
                        ELSE x.unindexed || ' chunks have no postings' END
            FROM kb_publication p
            JOIN kb_build b ON b.id = p.build_id
            JOIN kb_indexversion iv ON iv.id = b.index_version_id AND iv.pipeline_version <> 'p1'
            CROSS JOIN LATERAL (
                SELECT count(*) AS chunks,
                       count(*) FILTER (WHERE c.lexical_length IS NULL OR (c.lexical_length > 0
                           AND NOT EXISTS (SELECT 1 FROM kb_posting t WHERE t.chunk_id = c.id)))
                       AS unindexed
                FROM kb_chunk c WHERE c.build_id = b.id
            ) x
            LEFT JOIN kb_lexicalstat s ON s.build_id = b.id AND s.term = ''
            WHERE s.chunks IS DISTINCT FROM x.chunks OR x.unindexed > 0
            """
        )
    ]


def _tasks() -> list[Violation]:
    found = [
        Violation("task-can-run", f"task {task_id}", f"is {status} with no pending outbox event")
        for task_id, status in _rows(
            """
            SELECT t.id, t.status FROM ingestion_ingestiontask t
            WHERE t.status IN ('queued', 'retry_wait')
              AND NOT EXISTS (
                  SELECT 1 FROM ingestion_outboxevent e
                  WHERE e.task_id = t.id AND e.dead_at IS NULL
                    AND (e.published_at IS NULL OR e.published_at >= t.updated_at))
            """
        )
    ]
    found += [
        Violation("task-can-run", f"task {task_id}", "is running without a lease")
        for (task_id,) in _rows(
            "SELECT id FROM ingestion_ingestiontask WHERE status = 'running' "
            "AND (lease_expires_at IS NULL OR lease_owner = '')"
        )
    ]
    return found


def needed_sources(*, after: int = 0, limit: int | None = None) -> list[tuple[Any, ...]]:
    """(revision id, document id, kb id, storage path, sha256, size) of every revision whose
    source file a document may still need to be built again: its desired revision and the
    revisions of its published builds, unless the document was purged. By revision id."""
    return _rows(
        """
        SELECT r.id, d.id, d.kb_id, r.storage_path, r.sha256, r.size
        FROM kb_revision r JOIN kb_document d ON d.id = r.document_id
        WHERE r.id > %s AND d.purged_at IS NULL
          AND (r.number = d.desired_revision
               OR EXISTS (SELECT 1 FROM kb_publication p JOIN kb_build b ON b.id = p.build_id
                          WHERE b.revision_id = r.id))
        ORDER BY r.id LIMIT %s
        """,
        [after, limit],
    )


def stored_file_problem(path: str, sha256: str, size: int) -> str | None:
    """The readable reason a needed source cannot be read back, or None. Existence and size
    only (a stat); the restore and the parse stage compare the SHA-256."""
    problem = storage.file_problem(path, size=size)
    return f"stored file {problem}: {sha256}; restore storage from backup" if problem else None


def _stored_files() -> list[Violation]:
    """Every needed source is in storage. Its published chunks keep serving without it (they
    are complete); what a missing file breaks is building the document again."""
    found = []
    for revision_id, document_id, _kb_id, path, sha256, size in needed_sources():
        problem = stored_file_problem(path, sha256, size)
        if problem:
            subject = f"revision {revision_id} of document {document_id}"
            found.append(Violation("stored-file", subject, problem))
    return found


def verify() -> list[Violation]:
    """Every violation of the invariants in docs/ARCHITECTURE.md; empty when all hold."""
    return (
        _active_index_versions()
        + _publications()
        + _chunks()
        + _keyword_index()
        + _tasks()
        + _stored_files()
    )
