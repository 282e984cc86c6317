"""Reads of builds: progress (one bar: embedding is its first 80 %), and what each build is for
(served now, kept for rollback or restore, candidate, ...), computed from the same facts search
reads, so every page says what search does."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext, gettext_lazy, pgettext_lazy

from kb.failures import build_error_words
from kb.models import (
    Build,
    Document,
    IndexVersion,
    Publication,
)


def live_build_id(*, document: Document, index_version_id: int | None) -> int | None:
    return (
        Publication.objects.filter(document=document, index_version_id=index_version_id)
        .values_list("build_id", flat=True)
        .first()
    )


def live_build(*, document: Document) -> Build | None:
    """The build search serves for this document now (None if nothing is live or deleted)."""
    if document.deleted_at is not None:
        return None
    kb = document.kb
    publication = (
        Publication.objects.select_related("build__revision")
        .filter(document=document, index_version_id=kb.active_index_version_id)
        .first()
    )
    return publication.build if publication else None


def document_builds(*, document: Document) -> QuerySet[Build]:
    return (
        Build.objects.filter(document=document)
        .select_related("revision", "index_version")
        .order_by("-revision__number", "index_version__number")
    )


# The share of a build's bar that embedding fills; writing fills the rest. With the local `use`
# model embedding runs at 50-150 chunks/s on two cores and writing (rows, postings, HNSW inserts)
# at ~340 chunks/s (docs/BENCHMARKS.md, B1), so embedding is 70-90 % of a build's time.
EMBED_PERCENT = 80


RUNNING_BUILD_STATES = (Build.State.PENDING, Build.State.BUILDING)
# The progress label of a build that never got a chunk count, by state.
NOT_CHUNKED: dict[str, Any] = {
    Build.State.FAILED: gettext_lazy("— (failed before chunking)"),
    Build.State.SUPERSEDED: gettext_lazy("— (not chunked)"),
}
# A build's stage in words (`build_progress_of`'s "stage" stays the code).
STAGE_WORDS: dict[str, Any] = {
    "queued": pgettext_lazy("build stage", "queued"),
    "parsing": pgettext_lazy("build stage", "parsing"),
    "embedding": pgettext_lazy("build stage", "embedding"),
    "writing": pgettext_lazy("build stage", "writing"),
    Build.State.BUILDING: pgettext_lazy("build stage", "building"),
}


def current_failure_q(prefix: str = "") -> Q:
    """Failed builds that are a current problem, as a filter on Build (`prefix` for a relation:
    "build__"): those of the document's desired revision. A failure of a revision that is no
    longer the desired one (a newer revision was uploaded, or the document was rolled back) is
    history: it is shown in the document's builds as such, never counted as a failure, and
    offers no Retry (`build_retry` refuses it). The same rule as the *failed* state
    (`kb.document_states`)."""
    return Q(
        **{
            f"{prefix}state": Build.State.FAILED,
            f"{prefix}revision__number": F(f"{prefix}document__desired_revision"),
        }
    )


def failure_is_current(build: Build) -> bool:
    """`current_failure_q` for one build (its `revision` and `document` loaded)."""
    return (
        build.state == Build.State.FAILED
        and build.revision.number == build.document.desired_revision
    )


def build_progress_of(*, build: Build) -> dict[str, object]:
    """One build's progress: its stage, counts, the bar's percent and the words beside it.

    Stages: "queued", "parsing" (no expected count yet; the label says what the parse stage
    reported, "OCR page 12/40", when it did), "embedding" (fewer chunks with vectors
    than expected), "writing" (fewer chunks written than expected), then the build's state. The
    bar is one fraction that only moves forward: embedded chunks fill the first EMBED_PERCENT,
    written chunks the rest; the label counts the stage's own chunks ("embedding 120/400").
    Reads only the build row (and its already loaded revision and index version)."""
    expected = build.expected_chunk_count
    written = build.chunks_written
    # A written chunk has its vector (the write stage reads it from the cache); this also covers
    # builds embedded before chunks_embedded existed.
    embedded = max(build.chunks_embedded, written)
    if build.state == Build.State.PENDING:
        stage = "queued"
    elif build.state != Build.State.BUILDING:
        stage = str(build.state)
    elif expected is None:
        stage = "parsing"
    elif embedded < expected:
        stage = "embedding"
    elif written < expected:
        stage = "writing"
    else:
        stage = str(build.state)
    percent = 0
    if expected:
        weighted = EMBED_PERCENT * embedded + (100 - EMBED_PERCENT) * written
        percent = max(0, min(100, weighted // expected))
    if expected is None:
        # never chunked (it failed while parsing, say): no figures to show, and the word why
        label = (
            str(STAGE_WORDS.get(stage, stage))
            if build.state in RUNNING_BUILD_STATES
            else str(NOT_CHUNKED.get(build.state, "—"))
        )
        if stage == "parsing" and build.parse_progress:
            label = build.parse_progress  # "OCR page 12/40"
    elif stage == "embedding":
        label = gettext("embedding %(done)s/%(of)s") % {"done": embedded, "of": expected}
    elif build.state in RUNNING_BUILD_STATES:
        label = f"{STAGE_WORDS.get(stage, stage)} {written}/{expected}"
    else:
        label = f"{written}/{expected}"
    return {
        "id": build.pk,
        "revision": build.revision.number,
        "index_version": build.index_version.number,
        "state": build.state,
        "stage": stage,
        "embedded": embedded,
        "written": written,
        "expected": expected,
        "percent": percent,
        "label": label,
        # in the reader's language (the admin's JSON; the API never reads this)
        "error": build_error_words(build),
    }


def build_progress(*, document: Document) -> list[dict[str, object]]:
    """Per build of the document, newest revision first: `build_progress_of`. One query."""
    return [build_progress_of(build=b) for b in document_builds(document=document)]


@dataclass(frozen=True)
class BuildRole:
    """What a build is for, in words for people. `kind` is one of ROLE_KINDS (for styling and
    tests); `label` is what the page says ("served now", "kept for rollback (retired v1)")."""

    kind: str
    label: str

    @property
    def served(self) -> bool:
        return self.kind == "served"


ROLE_KINDS = (
    "served",  # search returns its chunks now
    "kept_for_restore",  # the pointer of a deleted document: served again on restore
    "kept_for_rollback",  # the pointer in a retired, retained index version
    "candidate",  # the pointer in an index version not active yet
    "retired",  # the pointer in a retired version past its retention window
    "building",  # queued, parsing, embedding or writing
    "awaiting_approval",
    "failed",
    "failed_earlier",  # a failure of a revision no longer desired: history, no Retry
    "superseded",
)


def served_now(*, document: Document) -> Build | None:
    """The build search returns for `document` now (to a reader of its groups): `live_build`."""
    return live_build(document=document)


def retained_until(version: IndexVersion, retention_days: int) -> Any:
    return version.retired_at + timedelta(days=retention_days) if version.retired_at else None


def build_role_of(*, build: Build, pointed: bool | None = None, now: Any = None) -> BuildRole:
    """The role of one build from its facts: `pointed` (a Publication names it; by default the
    `pointed` annotation of `builds_with_roles`, else one query) and its already loaded `kb`,
    `document` and `index_version` (select them related)."""
    if pointed is None:
        pointed = getattr(build, "pointed", None)
    if pointed is None:
        pointed = Publication.objects.filter(build_id=build.pk).exists()
    version = build.index_version
    kb = build.kb
    if pointed:
        if version.pk == kb.active_index_version_id:
            if build.document.deleted_at is None:
                return BuildRole("served", gettext("served now"))
            return BuildRole("kept_for_restore", gettext("kept for restore (document deleted)"))
        if version.state == IndexVersion.State.RETIRED:
            until = retained_until(version, kb.retention_days)
            if version.collected_at is None and until and until >= (now or timezone.now()):
                return BuildRole(
                    "kept_for_rollback",
                    gettext("kept for rollback (retired v%(n)s)") % {"n": version.number},
                )
            return BuildRole(
                "retired", gettext("retired v%(n)s, past retention") % {"n": version.number}
            )
        return BuildRole(
            "candidate", gettext("candidate (v%(n)s, not active)") % {"n": version.number}
        )
    if build.state in RUNNING_BUILD_STATES:
        return BuildRole("building", str(build_progress_of(build=build)["label"]))
    if build.state == Build.State.READY:
        return BuildRole("awaiting_approval", gettext("awaiting approval"))
    if build.state == Build.State.FAILED:
        if not failure_is_current(build):
            desired = build.document.desired_revision
            return BuildRole(
                "failed_earlier",
                gettext("failed earlier; r%(n)s is the current revision") % {"n": desired}
                if desired
                else gettext("failed"),
            )
        return BuildRole(
            "failed",
            gettext("failed: %(error)s") % {"error": build_error_words(build)}
            if build.error
            else gettext("failed"),
        )
    if build.collected_at is not None:
        return BuildRole("superseded", gettext("superseded (chunks collected)"))
    return BuildRole("superseded", gettext("superseded"))


def build_roles(*, builds: Iterable[Build]) -> dict[int, BuildRole]:
    """`build_role_of` for many builds (with `kb`, `document`, `index_version` loaded), by id:
    one query for their pointers."""
    builds = list(builds)
    pointed = set(
        Publication.objects.filter(build_id__in=[b.pk for b in builds]).values_list(
            "build_id", flat=True
        )
    )
    now = timezone.now()
    return {b.pk: build_role_of(build=b, pointed=b.pk in pointed, now=now) for b in builds}


def builds_with_roles(builds: QuerySet[Build]) -> QuerySet[Build]:
    """`builds` with what `build_role_of` needs, in the same query: `pointed` (annotated)."""
    return builds.select_related("kb", "document", "index_version", "revision").annotate(
        pointed=Exists(Publication.objects.filter(build_id=OuterRef("pk")))
    )
