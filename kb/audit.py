"""Reconciliation that scales (seed 002: "nobody diffs every key every hour"), in three levels.

- **Event level** (`ingestion.reconciler`, every pass): outbox lag, dead letters of waiting
  tasks, tasks never claimed — indexed reads of small sets.
- **Document level** (bounded per pass): the state checks of the reconciler's catalogue, and
  `seal_pending`: each verified build is read in full *once* (`builds_check`: count, embeddings,
  ordinals, dimensions, manifest hash) and sealed with its chunk count and digest
  (`kb_buildseal`). Plus one slice of the document walk (`audit_slice`), the same slices
  `kb_verify --slice-size N --resume` runs.
- **Shard level** (`shard_summaries`): per (knowledge base, index version, window of
  WINDOW_BUILDS build ids — ids are handed out in time order, so a window is a stretch of time)
  the sums the builds' rows promise (expected chunk counts, sealed digests) against the sums
  of their chunk rows, computed in the database; a pass summarises SUMMARY_BUILDS builds and
  moves a cursor. Only a window that disagrees is read chunk by chunk (`window_deep_check`, one
  page of at most WINDOW_BUILDS builds).

The digest of a chunk is `hashtextextended(content_hash || ':' || ordinal, build_id)` (64 bits);
a build's and a window's digest are sums. A lost, extra, moved or altered chunk changes a count
or a sum; embeddings are not in the digest (only the document walk reads them).

Locking: nothing here takes a row lock but the walk's cursor row (`SELECT … FOR UPDATE SKIP
LOCKED`: a second runner of the same walk does nothing). Seals are written with an upsert that
only the reconciler (a singleton) and the deep checks perform; a seal whose `verified_at` is not
the build's is ignored, so a concurrent rebuild can never be hidden by a stale seal.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from kb import verify
from kb.completeness import COLUMNS as COMPLETENESS_COLUMNS
from kb.completeness import Completeness
from kb.models import AuditCursor, AuditSlice
from kb.transactions import retry_conflicts

DIGEST = "hashtextextended(c.content_hash || ':' || c.ordinal, c.build_id)"


def window_builds() -> int:
    return int(getattr(settings, "AUDIT_WINDOW_BUILDS", 64))


def _rows(sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


# --- document level: one build read in full ---------------------------------------------------


@dataclass(frozen=True)
class BuildCheck:
    build_id: int
    kb_id: int
    document_id: int
    publication_id: int | None  # the pointer at it, when it is live
    verified_at: Any
    chunk_count: int
    digest: Decimal | None
    problems: list[str]


def builds_check(build_ids: Sequence[int]) -> list[BuildCheck]:
    """Every chunk of the builds, against their manifests, and their digests: one statement, so
    one snapshot. Reads only."""
    if not build_ids:
        return []
    checks = []
    for row in _rows(
        f"""
        SELECT b.id, b.kb_id, b.document_id, p.id, b.verified_at,
               b.expected_chunk_count, iv.dimensions, b.manifest_sha256, sum({DIGEST}),
               b.english_expected, iv.english_dimensions, {COMPLETENESS_COLUMNS}
        FROM kb_build b
        JOIN kb_indexversion iv ON iv.id = b.index_version_id
        LEFT JOIN kb_publication p ON p.build_id = b.id
        LEFT JOIN kb_chunk c ON c.build_id = b.id
        WHERE b.id = ANY(%s)
        GROUP BY b.id, iv.dimensions, iv.english_dimensions, p.id
        ORDER BY b.id
        """,  # noqa: S608 (constant fragments; values are bound)
        [list(build_ids)],
    ):
        build_id, kb_id, document_id, publication_id, verified_at = row[:5]
        expected, dimensions, manifest, digest = row[5:9]
        english_expected, english_dimensions = row[9:11]
        completeness = Completeness(*row[11:])
        problems = completeness.problems(
            expected_count=expected,
            dimensions=dimensions,
            manifest=manifest,
            english_expected=english_expected,
            english_dimensions=english_dimensions,
        )
        checks.append(
            BuildCheck(
                int(build_id),
                int(kb_id),
                int(document_id),
                publication_id,
                verified_at,
                completeness.chunk_count,
                digest,
                problems,
            )
        )
    return checks


def seals_write(checks: Sequence[BuildCheck]) -> None:
    """Record each checked build's seal: ok with its count and digest, or damaged. Idempotent
    (an upsert per build); a build checked while unverified gets none."""
    rows = [c for c in checks if c.verified_at is not None]
    if not rows:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO kb_buildseal (build_id, verified_at, ok, chunk_count, digest, sealed_at)
            SELECT * FROM unnest(%s::bigint[], %s::timestamptz[], %s::boolean[], %s::int[],
                                 %s::numeric[], %s::timestamptz[])
            ON CONFLICT (build_id) DO UPDATE SET
                verified_at = EXCLUDED.verified_at, ok = EXCLUDED.ok,
                chunk_count = EXCLUDED.chunk_count, digest = EXCLUDED.digest,
                sealed_at = EXCLUDED.sealed_at
            """,
            [
                [c.build_id for c in rows],
                [c.verified_at for c in rows],
                [not c.problems for c in rows],
                [c.chunk_count for c in rows],
                [None if c.problems else c.digest for c in rows],
                [timezone.now()] * len(rows),
            ],
        )


def seal_pending(*, chunk_budget: int) -> tuple[list[BuildCheck], int]:
    """Read in full the oldest verified, retained builds without a valid seal, about
    `chunk_budget` chunks' worth (at least one build), and seal them. Returns the damaged ones and
    how many builds were read. Call from the reconciler (a singleton)."""
    candidates = _rows(
        """
        SELECT b.id, b.expected_chunk_count FROM kb_build b
        LEFT JOIN kb_buildseal s ON s.build_id = b.id
        WHERE b.verified_at IS NOT NULL AND b.collected_at IS NULL
          AND (s.build_id IS NULL OR s.verified_at <> b.verified_at)
        ORDER BY b.id LIMIT 1000
        """
    )
    chosen: list[int] = []
    total = 0
    for build_id, expected in candidates:
        if chosen and total + (expected or 0) > chunk_budget:
            break
        chosen.append(build_id)
        total += expected or 0
    checks = builds_check(chosen)
    seals_write(checks)
    return [c for c in checks if c.problems], len(checks)


# --- shard level: sums per (kb, index version, window) ----------------------------------------


@dataclass(frozen=True)
class WindowSummary:
    kb_id: int
    index_version_id: int
    window: int
    first_build: int
    last_build: int
    builds: int
    sealed: int
    expected_chunks: int
    chunks: int
    sealed_digest: Decimal | None
    digest: Decimal | None

    @property
    def agrees(self) -> bool:
        return self.expected_chunks == self.chunks and self.sealed_digest == self.digest

    def __str__(self) -> str:
        return (
            f"kb {self.kb_id} version {self.index_version_id} builds "
            f"{self.first_build}..{self.last_build}: {self.chunks} chunks of "
            f"{self.expected_chunks} expected"
            + ("" if self.sealed_digest == self.digest else ", digest differs from the seals")
        )


def shard_summaries(*, after_build: int, through_build: int) -> list[WindowSummary]:
    """The windows of the verified, retained builds with ids in (after_build, through_build]: what
    their rows promise against what their chunks sum to. Builds found damaged (a seal with `ok`
    false) are left out until they are rebuilt. One statement; reads only."""
    width = window_builds()
    return [
        WindowSummary(*row)
        for row in _rows(
            f"""
            WITH b AS MATERIALIZED (
                SELECT b.id, b.kb_id, b.index_version_id, b.expected_chunk_count AS expected,
                       s.digest AS sealed
                FROM kb_build b
                LEFT JOIN kb_buildseal s ON s.build_id = b.id AND s.verified_at = b.verified_at
                WHERE b.id > %(after)s AND b.id <= %(through)s
                  AND b.verified_at IS NOT NULL AND b.collected_at IS NULL
                  AND s.ok IS DISTINCT FROM false
            ), c AS (
                SELECT c.build_id, count(*) AS n, sum({DIGEST}) AS digest
                FROM kb_chunk c WHERE c.build_id > %(after)s AND c.build_id <= %(through)s
                GROUP BY c.build_id
            )
            SELECT b.kb_id, b.index_version_id, b.id / %(width)s, min(b.id), max(b.id),
                   count(*), count(b.sealed), coalesce(sum(b.expected), 0), coalesce(sum(c.n), 0),
                   sum(b.sealed), sum(c.digest) FILTER (WHERE b.sealed IS NOT NULL)
            FROM b LEFT JOIN c ON c.build_id = b.id
            GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
            """,  # noqa: S608 (constant fragments; values are bound)
            {"after": after_build, "through": through_build, "width": width},
        )
    ]


def window_deep_check(summary: WindowSummary) -> list[BuildCheck]:
    """Read every chunk of one disagreeing window's builds (one page: at most WINDOW_BUILDS
    builds), seal the whole ones again and mark the damaged; returns the damaged."""
    ids = [
        build_id
        for (build_id,) in _rows(
            """
            SELECT b.id FROM kb_build b
            WHERE b.id BETWEEN %s AND %s AND b.kb_id = %s AND b.index_version_id = %s
              AND b.verified_at IS NOT NULL AND b.collected_at IS NULL
            ORDER BY b.id
            """,
            [summary.first_build, summary.last_build, summary.kb_id, summary.index_version_id],
        )
    ]
    checks = builds_check(ids)
    seals_write(checks)
    return [c for c in checks if c.problems]


@dataclass
class ShardPass:
    summaries: int = 0
    disagreeing: list[WindowSummary] = field(default_factory=list)
    deep_checked_builds: int = 0
    damaged: list[BuildCheck] = field(default_factory=list)
    through_build: int = 0
    wrapped: bool = False


def shard_slice(*, builds: int, deep_windows: int, walker: str = "shards") -> ShardPass:
    """Summarise the next `builds` build ids of the shard walk, deep-check at most `deep_windows`
    disagreeing windows, and move the walk's cursor past what was covered (to 0 after the last
    build). Call from one runner at a time (the reconciler's lock)."""
    cursor = _cursor(walker)
    after = int(cursor.position_id)
    through = after + builds
    result = ShardPass(through_build=through)
    summaries = shard_summaries(after_build=after, through_build=through)
    result.summaries = len(summaries)
    # in build order, so that what one pass leaves unread lies after what it read
    result.disagreeing = sorted(
        (s for s in summaries if not s.agrees), key=lambda s: (s.first_build, s.kb_id)
    )
    for summary in result.disagreeing[:deep_windows]:
        damaged = window_deep_check(summary)
        result.deep_checked_builds += summary.builds
        result.damaged += damaged
    left = [s.first_build for s in result.disagreeing[deep_windows:]]
    if left and deep_windows and min(left) - 1 > after:
        # More disagreement than one pass may read: the next slice starts at the first window
        # left unread (a window deep-checked agrees afterwards: resealed, or its damage out).
        through = result.through_build = min(left) - 1
    last = _rows("SELECT coalesce(max(id), 0) FROM kb_build")[0][0]
    now = timezone.now()
    if through >= last:
        result.wrapped = True
        AuditCursor.objects.filter(pk=walker).update(
            position_id=0,
            pass_number=cursor.pass_number + 1,
            pass_started_at=now,
            last_pass_finished_at=now,
            updated_at=now,
        )
    else:
        AuditCursor.objects.filter(pk=walker).update(position_id=through, updated_at=now)
    return result


# --- the document walk: bounded, resumable slices -----------------------------------------------


@dataclass
class SliceResult:
    walker: str
    pass_number: int
    after: tuple[int, int]
    through: tuple[int, int]
    documents: int
    violations: list[verify.Violation]
    seconds: float
    last_of_pass: bool
    busy: bool = False


def _cursor(walker: str) -> AuditCursor:
    now = timezone.now()
    cursor, _ = AuditCursor.objects.get_or_create(
        name=walker, defaults={"pass_started_at": now, "updated_at": now}
    )
    return cursor


def audit_restart(*, walker: str) -> None:
    """Start the walk's pass again from the first document (its slices stay on record)."""
    _cursor(walker)
    now = timezone.now()
    AuditCursor.objects.filter(pk=walker).update(
        position_kb=0, position_id=0, pass_started_at=now, updated_at=now
    )


_slices_in_process = 0


def _fault_before_commit() -> None:
    """CANON_FAULT_AUDIT_SLICE_EXIT=N: end the process (os._exit) in its N-th slice, after the
    checks, before the commit — a kill in the middle of a slice (tests)."""
    global _slices_in_process
    _slices_in_process += 1
    if os.environ.get("CANON_FAULT_AUDIT_SLICE_EXIT") == str(_slices_in_process):
        os._exit(137)


@retry_conflicts
def audit_slice(*, walker: str, size: int, global_checks: bool = True) -> SliceResult:
    """Check the next `size` documents of the walk `walker` (everything under them:
    `kb.verify.documents_check`; the global checks too when the slice starts a pass), record the
    slice and move the cursor past them — all in one repeatable-read transaction, so the checks
    read one snapshot and a slice killed before its commit leaves no trace and is done again:
    over a pass, every document is in exactly one recorded slice. The cursor row is locked
    (SKIP LOCKED): a second runner of the same walk gets `busy` and does nothing. After the
    last document the next pass starts at the first."""
    _cursor(walker)
    started = time.perf_counter()
    outer = connection.in_atomic_block  # then the outer transaction's snapshot rules
    with transaction.atomic():
        if not outer:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cursor_row = (
            AuditCursor.objects.select_for_update(skip_locked=True).filter(pk=walker).first()
        )
        if cursor_row is None:
            return SliceResult(walker, 0, (0, 0), (0, 0), 0, [], 0.0, False, busy=True)
        after = (int(cursor_row.position_kb), int(cursor_row.position_id))
        documents = _rows(
            "SELECT kb_id, id FROM kb_document WHERE (kb_id, id) > (%s, %s) "
            "ORDER BY kb_id, id LIMIT %s",
            [*after, size],
        )
        last_of_pass = len(documents) < size
        through = (int(documents[-1][0]), int(documents[-1][1])) if documents else after
        violations = (verify.global_checks() if global_checks and after == (0, 0) else []) + (
            verify.documents_check(verify.Documents(after, through)) if documents else []
        )
        _fault_before_commit()
        seconds = time.perf_counter() - started
        now = timezone.now()
        AuditSlice.objects.create(
            cursor_id=walker,
            pass_number=cursor_row.pass_number,
            after_kb=after[0],
            after_id=after[1],
            through_kb=through[0],
            through_id=through[1],
            items=len(documents),
            violations=[str(v) for v in violations[:1000]],
            seconds=seconds,
            last_of_pass=last_of_pass,
            finished_at=now,
        )
        if last_of_pass:
            AuditCursor.objects.filter(pk=walker).update(
                pass_number=cursor_row.pass_number + 1,
                position_kb=0,
                position_id=0,
                pass_started_at=now,
                last_pass_finished_at=now,
                updated_at=now,
            )
            # the finished pass stays on record; older ones go
            AuditSlice.objects.filter(
                cursor_id=walker, pass_number__lt=cursor_row.pass_number
            ).delete()
        else:
            AuditCursor.objects.filter(pk=walker).update(
                position_kb=through[0], position_id=through[1], updated_at=now
            )
    return SliceResult(
        walker,
        cursor_row.pass_number,
        after,
        through,
        len(documents),
        violations,
        seconds,
        last_of_pass,
    )
