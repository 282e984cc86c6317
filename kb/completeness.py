"""Whether a build's chunks are complete: the one aggregate the switch's write stage, `kb_verify`
and the reconciler's audit all compute, and the reasons a build may not be switched live.

`COLUMNS` is that aggregate over chunks aliased `c`; a statement that selects it (grouped by
build, perhaps beside other columns) passes those columns to `Completeness` in order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.db import connection

from kb.failures import INCOMPLETE
from kb.models import Build
from textkit.reasons import ReasonedError


class IncompleteBuild(ReasonedError):
    """The build failed its completeness check; it must never be switched live."""


def incomplete_build(build_id: int, problems: list[str]) -> IncompleteBuild:
    """The error for a build whose chunks fail the check with `problems` (in English)."""
    return IncompleteBuild(INCOMPLETE(build=str(build_id), problems="; ".join(problems)))


# Count, embedded, distinct ordinals, ordinal range, dimension range, manifest hash; English
# vectors and their dimension range.
COLUMNS = """count(c.id), count(c.embedding), count(DISTINCT c.ordinal),
       min(c.ordinal), max(c.ordinal),
       min(vector_dims(c.embedding)), max(vector_dims(c.embedding)),
       encode(sha256(convert_to(coalesce(
           string_agg(c.content_hash, ',' ORDER BY c.ordinal), ''), 'UTF8')), 'hex'),
       count(c.embedding_en),
       min(vector_dims(c.embedding_en)), max(vector_dims(c.embedding_en))"""


@dataclass(frozen=True)
class Completeness:
    chunk_count: int
    embedded_count: int
    distinct_ordinals: int
    min_ordinal: int | None
    max_ordinal: int | None
    min_dimensions: int | None
    max_dimensions: int | None
    manifest_sha256: str | None
    english_count: int = 0
    min_english_dimensions: int | None = None
    max_english_dimensions: int | None = None

    def problems(
        self,
        *,
        expected_count: int | None,
        dimensions: int,
        manifest: str,
        english_expected: int | None = None,
        english_dimensions: int | None = None,
    ) -> list[str]:
        """Reasons this build may not be switched live; empty when complete. `english_expected`:
        how many chunks must carry an English vector of `english_dimensions` (None: the
        version has no English list, and none may)."""
        problems = self._english_problems(english_expected, english_dimensions)
        if expected_count is None:
            problems.append("the expected chunk count is unknown")
        elif self.chunk_count != expected_count:
            problems.append(f"{self.chunk_count} of {expected_count} chunks are written")
        if self.embedded_count != self.chunk_count:
            problems.append(f"{self.chunk_count - self.embedded_count} chunks have no embedding")
        if self.distinct_ordinals != self.chunk_count or (
            self.chunk_count and (self.min_ordinal != 0 or self.max_ordinal != self.chunk_count - 1)
        ):
            problems.append("chunk ordinals are not exactly 0..n-1")
        if self.chunk_count and (
            self.min_dimensions != dimensions or self.max_dimensions != dimensions
        ):
            problems.append(
                f"embedding dimensions {self.min_dimensions}..{self.max_dimensions} "
                f"differ from the index version's {dimensions}"
            )
        if self.chunk_count and self.manifest_sha256 != manifest:
            problems.append("the manifest hash of the written chunks does not match")
        return problems

    def _english_problems(self, expected: int | None, dimensions: int | None) -> list[str]:
        if expected is None:
            if self.english_count:
                return [f"{self.english_count} chunks have an English vector no list asks for"]
            return []
        problems = []
        if self.english_count != expected:
            problems.append(f"{self.english_count} of {expected} English vectors are written")
        if self.english_count and (
            self.min_english_dimensions != dimensions or self.max_english_dimensions != dimensions
        ):
            problems.append(
                f"English vector dimensions {self.min_english_dimensions}.."
                f"{self.max_english_dimensions} differ from the English list's {dimensions}"
            )
        return problems


def build_completeness(*, build_id: int) -> Completeness:
    """Facts about a build's chunks, read in the caller's transaction (and snapshot)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {COLUMNS} FROM kb_chunk c WHERE c.build_id = %s",  # noqa: S608 (constant)
            [build_id],
        )
        row = cursor.fetchone()
    assert row is not None
    return Completeness(*row)


def build_switch_problems(build: Build) -> list[str]:
    """Reasons `build` may not be pointed at, from facts stored on its row: O(1) in its size.

    The write stage records `verified_at` after checking every chunk (`build_completeness`) in a
    fenced transaction, and every chunk write clears it under the same fence, so a set
    `verified_at` on a build that was not collected means its rows are complete. The caller holds
    the build lock, which retention also takes before it gives a build up.
    """
    if build.collected_at is not None:
        return ["its chunks were garbage-collected"]
    if not build.expected_chunk_count:
        return ["the expected chunk count is unknown"]
    if build.verified_at is None:
        return [
            f"{build.chunks_written} of {build.expected_chunk_count} chunks are written "
            "and they were not verified complete"
        ]
    return []


def manifest_of(content_hashes: list[str]) -> str:
    """The manifest hash the database computes in `build_completeness`, computed in Python."""
    return hashlib.sha256(",".join(content_hashes).encode()).hexdigest()
