"""Invariant checks behind `manage.py kb_verify`. Reads only (the database, and the stored files'
sizes).

The checks come in two kinds. Global ones (`global_checks`: the knowledge bases' active versions,
the tasks) read small, indexed tables. Per-document ones (`documents_check`) read a range of
documents in (kb id, document id) order with everything under them: pointers, builds, every
chunk of every live or verified build, the keyword index and the stored files. `verify()` is both
over the whole database, one statement per check; `kb.audit` runs the per-document checks in
bounded, resumable slices (`kb_verify --slice-size N --resume`) and the reconciler one slice per
pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection

from kb import storage
from kb.completeness import COLUMNS as COMPLETENESS_COLUMNS
from kb.completeness import Completeness


@dataclass(frozen=True)
class Violation:
    check: str
    subject: str
    detail: str
    # Where it is, when it is about one document (the reconciler files it under that document).
    kb_id: int | None = None
    document_id: int | None = None
    build_id: int | None = None

    def __str__(self) -> str:
        return f"[{self.check}] {self.subject}: {self.detail}"


@dataclass(frozen=True)
class Documents:
    """The documents (kb id, document id) in (after, through]; through None: to the end."""

    after: tuple[int, int] = (0, 0)
    through: tuple[int, int] | None = None

    def where(self, alias: str = "d") -> tuple[str, list[Any]]:
        sql = f"({alias}.kb_id, {alias}.id) > (%s, %s)"
        params: list[Any] = list(self.after)
        if self.through is not None:
            sql += f" AND ({alias}.kb_id, {alias}.id) <= (%s, %s)"
            params += list(self.through)
        return sql, params


EVERY_DOCUMENT = Documents()


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


def _pointers(documents: Documents) -> list[Violation]:
    where, params = documents.where()
    found = [
        Violation("pointer", f"publication {pub_id}", detail, kb_id, doc_id)
        for pub_id, kb_id, doc_id, detail in _rows(
            f"""
            SELECT p.id, d.kb_id, d.id,
                   'points at build ' || b.id || ' (' || b.state || ') of document '
                   || b.document_id || ', index version ' || b.index_version_id
            FROM kb_document d
            JOIN kb_publication p ON p.document_id = d.id
            JOIN kb_build b ON b.id = p.build_id
            WHERE {where}
              AND (b.document_id <> p.document_id OR b.index_version_id <> p.index_version_id
                   OR b.kb_id <> p.kb_id OR b.state <> 'live')
            """,  # noqa: S608 (constant fragments; values are bound)
            params,
        )
    ]
    found += [
        Violation(
            "pointer",
            f"build {build_id}",
            "is live but no publication points at it",
            kb_id,
            doc_id,
            build_id,
        )
        for build_id, kb_id, doc_id in _rows(
            f"""
            SELECT b.id, d.kb_id, d.id FROM kb_document d JOIN kb_build b ON b.document_id = d.id
            WHERE {where} AND b.state = 'live'
              AND NOT EXISTS (SELECT 1 FROM kb_publication p WHERE p.build_id = b.id)
            """,  # noqa: S608 (constant fragments; values are bound)
            params,
        )
    ]
    return found


def _builds(documents: Documents) -> list[Violation]:
    """One pass over the chunks of the documents' builds: every live build (a publication points
    at it) and every verified one not given up (a rollback may point at it) is complete against
    its manifest, its English vectors too where its version has an English list (every chunk
    not in Chinese has one of the list's dimensions, no other chunk has one); no chunk
    disagrees with its build; no ordinal repeats."""
    where, params = documents.where()
    found: list[Violation] = []
    duplicated: list[int] = []
    for row in _rows(
        f"""
        SELECT b.id, d.kb_id, d.id, p.id IS NOT NULL,
               p.id IS NOT NULL OR (b.verified_at IS NOT NULL AND b.collected_at IS NULL),
               b.expected_chunk_count, iv.dimensions, b.manifest_sha256,
               count(c.id) FILTER (WHERE c.document_id <> b.document_id
                                      OR c.index_version_id <> b.index_version_id
                                      OR c.kb_id <> b.kb_id),
               count(c.id) - count(DISTINCT c.ordinal),
               b.english_expected, iv.english_dimensions, {COMPLETENESS_COLUMNS}
        FROM kb_document d
        JOIN kb_build b ON b.document_id = d.id
        JOIN kb_indexversion iv ON iv.id = b.index_version_id
        LEFT JOIN kb_publication p ON p.build_id = b.id
        LEFT JOIN kb_chunk c ON c.build_id = b.id
        WHERE {where}
        GROUP BY b.id, d.kb_id, d.id, iv.dimensions, iv.english_dimensions, p.id
        """,  # noqa: S608 (constant fragments; values are bound)
        params,
    ):
        build_id, kb_id, doc_id, live, checked, expected, dimensions, manifest = row[:8]
        strangers, repeats = row[8:10]
        subject = f"build {build_id}"
        if strangers:
            detail = f"{strangers} chunks disagree with their build"
            found.append(Violation("chunk-identity", subject, detail, kb_id, doc_id, build_id))
        if repeats:
            duplicated.append(build_id)
        if not checked:
            continue
        english_expected, english_dimensions = row[10:12]
        problems = Completeness(*row[12:]).problems(
            expected_count=expected,
            dimensions=dimensions,
            manifest=manifest,
            english_expected=english_expected,
            english_dimensions=english_dimensions,
        )
        if live and not expected:
            problems.append("the live build has no chunks")
        check = "live-build-complete" if live else "retained-build-complete"
        found += [Violation(check, subject, p, kb_id, doc_id, build_id) for p in problems]
    if duplicated:  # the unique constraint forbids it; named only where the pass saw it
        found += [
            Violation(
                "duplicate-ordinal",
                f"build {build_id}",
                f"ordinal {ordinal} appears {n} times",
                kb_id,
                doc_id,
                build_id,
            )
            for build_id, kb_id, doc_id, ordinal, n in _rows(
                """
                SELECT c.build_id, b.kb_id, b.document_id, c.ordinal, count(*)
                FROM kb_chunk c JOIN kb_build b ON b.id = c.build_id
                WHERE c.build_id = ANY(%s)
                GROUP BY 1, 2, 3, 4 HAVING count(*) > 1
                """,
                [duplicated],
            )
        ]
    return found


def _purged(documents: Documents) -> list[Violation]:
    where, params = documents.where()
    return [
        Violation(
            "deleted-document", f"document {doc_id}", f"purged but {n} chunks remain", kb_id, doc_id
        )
        for doc_id, kb_id, n in _rows(
            f"""
            SELECT d.id, d.kb_id, count(c.id) FROM kb_document d
            JOIN kb_chunk c ON c.document_id = d.id
            WHERE {where} AND d.purged_at IS NOT NULL GROUP BY d.id
            """,  # noqa: S608 (constant fragments; values are bound)
            params,
        )
    ]


def _keyword_index(documents: Documents) -> list[Violation]:
    """Every live build of a postings version (pipeline p2 on) is in the keyword index: each
    chunk has postings and a length, and the build's statistics count its chunks."""
    where, params = documents.where()
    return [
        Violation("keyword-index", f"build {build_id}", detail, kb_id, doc_id, build_id)
        for build_id, kb_id, doc_id, detail in _rows(
            f"""
            SELECT b.id, d.kb_id, d.id,
                   CASE WHEN s.chunks IS NULL THEN 'has no BM25 statistics'
                        WHEN s.chunks <> x.chunks THEN 'statistics count ' || s.chunks
                             || ' chunks, the build has ' || x.chunks
                        ELSE x.unindexed || ' chunks have no postings' END
            FROM kb_document d
            JOIN kb_publication p ON p.document_id = d.id
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
            WHERE {where} AND (s.chunks IS DISTINCT FROM x.chunks OR x.unindexed > 0)
            """,  # noqa: S608 (constant fragments; values are bound)
            params,
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


def needed_sources(
    *, after: int = 0, limit: int | None = None, documents: Documents = EVERY_DOCUMENT
) -> list[tuple[Any, ...]]:
    """(revision id, document id, kb id, storage path, sha256, size) of every revision whose
    source file a document may still need to be built again: its desired revision and the
    revisions of its published builds, unless the document was purged. By revision id."""
    where, params = documents.where()
    return _rows(
        f"""
        SELECT r.id, d.id, d.kb_id, r.storage_path, r.sha256, r.size
        FROM kb_revision r JOIN kb_document d ON d.id = r.document_id
        WHERE r.id > %s AND {where} AND d.purged_at IS NULL
          AND (r.number = d.desired_revision
               OR EXISTS (SELECT 1 FROM kb_publication p JOIN kb_build b ON b.id = p.build_id
                          WHERE b.revision_id = r.id))
        ORDER BY r.id LIMIT %s
        """,  # noqa: S608 (constant fragments; values are bound)
        [after, *params, limit],
    )


def stored_file_problem(path: str, sha256: str, size: int) -> str | None:
    """The readable reason a needed source cannot be read back, or None. Existence and size
    only (a stat); the restore and the parse stage compare the SHA-256."""
    problem = storage.file_problem(path, size=size)
    return f"stored file {problem}: {sha256}; restore storage from backup" if problem else None


def _stored_files(documents: Documents) -> list[Violation]:
    """Every needed source is in storage. Its published chunks keep serving without it (they
    are complete); what a missing file breaks is building the document again."""
    found = []
    checked: dict[str, str | None] = {}  # revisions often share a file (same bytes)
    for revision_id, document_id, kb_id, path, sha256, size in needed_sources(documents=documents):
        key = f"{path}:{size}"
        if key not in checked:
            checked[key] = stored_file_problem(path, sha256, size)
        problem = checked[key]
        if problem:
            subject = f"revision {revision_id} of document {document_id}"
            found.append(Violation("stored-file", subject, problem, kb_id, document_id))
    return found


def global_checks() -> list[Violation]:
    """The checks over small, indexed tables: once per audit pass."""
    return _active_index_versions() + _tasks()


def documents_check(documents: Documents) -> list[Violation]:
    """Every per-document invariant over `documents` (and everything under them)."""
    return (
        _pointers(documents)
        + _builds(documents)
        + _purged(documents)
        + _keyword_index(documents)
        + _stored_files(documents)
    )


def verify() -> list[Violation]:
    """Every violation of the invariants in docs/ARCHITECTURE.md; empty when all hold."""
    return global_checks() + documents_check(EVERY_DOCUMENT)
