"""Reads of index versions: which receive builds, how far a version's builds got, its settings,
status (ready computed from coverage), the rollback target and two versions side by side."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Avg, Count, Q, QuerySet
from django.db.models import F as models_F
from django.db.models.functions import Length
from django.utils import timezone

from kb.ann import ann_index_state
from kb.models import (
    Build,
    Chunk,
    Document,
    IndexVersion,
    KnowledgeBase,
    Publication,
)
from kb.selectors.builds import RUNNING_BUILD_STATES, retained_until

LIVE_INDEX_VERSION_STATES = (
    IndexVersion.State.BUILDING,
    IndexVersion.State.READY,
    IndexVersion.State.ACTIVE,
)


def live_index_versions(*, kb_id: int) -> QuerySet[IndexVersion]:
    """Index versions that must receive a build of every new revision: the active one, the
    candidates, and retired ones still retained (so rolling back to them never serves stale
    text)."""
    retention_days = KnowledgeBase.objects.values_list("retention_days", flat=True).get(pk=kb_id)
    cutoff = timezone.now() - timedelta(days=retention_days)
    return (
        IndexVersion.objects.filter(kb_id=kb_id)
        .filter(
            Q(state__in=LIVE_INDEX_VERSION_STATES)
            | Q(state=IndexVersion.State.RETIRED, retired_at__gte=cutoff, collected_at__isnull=True)
        )
        .order_by("number")
    )


@dataclass(frozen=True)
class VersionProgress:
    total: int
    live: int
    building: int
    failed: list[str]
    failed_count: int = 0  # every failed build, named in `failed` or not


def index_version_progress(*, version: IndexVersion, named: Q | None = None) -> VersionProgress:
    """Documents built (live in this version at their desired revision) out of all documents.
    Failures of documents outside `named` (those the reader may not read) are counted in one
    line, not named."""
    documents = Document.objects.filter(
        kb_id=version.kb_id, deleted_at__isnull=True, desired_revision__isnull=False
    )
    total = documents.count()
    live = Publication.objects.filter(
        index_version=version,
        document__in=documents,
        build__revision__number=models_F("document__desired_revision"),
    ).count()
    builds = Build.objects.filter(index_version=version, document__in=documents)
    failures = builds.filter(state=Build.State.FAILED)
    shown = failures if named is None else failures.filter(document__in=documents.filter(named))
    failed = [
        f"{b.document.key} r{b.revision.number}: {b.error}"
        for b in shown.select_related("document", "revision")
    ]
    hidden = 0 if named is None else failures.count() - len(failed)
    failed_count = len(failed) + hidden
    if hidden:
        failed.append(f"{hidden} failed in documents of access groups you do not hold")
    building = builds.filter(state__in=[Build.State.PENDING, Build.State.BUILDING]).count()
    return VersionProgress(
        total=total,
        live=live,
        building=building,
        failed=failed,
        failed_count=failed_count,
    )


def index_version_settings(version: IndexVersion) -> list[tuple[str, str]]:
    """What makes one index version differ from another, as (label, value) rows."""
    return [
        ("provider", version.provider),
        ("model", version.model),
        ("dimensions", str(version.dimensions)),
        ("metric", version.metric),
        ("chunk size", str(version.chunk_size)),
        ("chunk overlap", str(version.chunk_overlap)),
        ("pipeline", version.pipeline_version),
        ("vector storage", version.vector_storage),
    ]


def index_version_settings_line(version: IndexVersion) -> str:
    """The settings in one line: "hash/canon-hash-v1 · 384d cosine · chunks 800/100 · p2"."""
    return (
        f"{version.provider}/{version.model} · {version.dimensions}d {version.metric} · "
        f"chunks {version.chunk_size}/{version.chunk_overlap} · {version.pipeline_version}"
        + (f" · {version.vector_storage}" if version.vector_storage != "vector" else "")
    )


def index_version_settings_record(version: IndexVersion | None) -> dict[str, Any] | None:
    """The settings as a JSON object, for audit entries."""
    if version is None:
        return None
    return {
        "id": version.pk,
        "number": version.number,
        "provider": version.provider,
        "model": version.model,
        "dimensions": version.dimensions,
        "metric": version.metric,
        "chunk_size": version.chunk_size,
        "chunk_overlap": version.chunk_overlap,
        "pipeline_version": version.pipeline_version,
        "vector_storage": version.vector_storage,
    }


@dataclass(frozen=True)
class VersionStatus:
    """What an index version is doing, for its row: `kind` is "active", "ready", "building",
    "indexing" (every document built, its vector index being built: `kb.ann_build`),
    "incomplete" (nothing running, some documents failed), "retired", "collected" or "failed";
    `swappable`: "Approve swap…" may be offered (and accepted)."""

    kind: str
    label: str
    swappable: bool
    retained_until: Any = None


def index_version_status(
    *, version: IndexVersion, progress: VersionProgress, kb: KnowledgeBase
) -> VersionStatus:
    """The state an index version is shown in, computed from coverage rather than stored.

    Readiness is computed here, not kept in `IndexVersion.state`: nothing moves a version to
    READY, and a stored READY would go stale at the next upload (which makes the version
    incomplete again until that revision is built into it). A candidate is *ready* exactly when
    the swap's own coverage check (`kb.services.index_versions.index_version_coverage_gaps`) finds
    no gap: every non-deleted document is live in it at its desired revision (`progress.live ==
    progress.total`). A retired version still inside the retention window keeps receiving builds of
    new uploads (`live_index_versions`), so a rollback to it never serves stale text; a newer one
    (rolled back from) may be swapped in again. A candidate whose builds are written but
    whose vector index does not exist yet or is being built is *building index*, not ready: the
    swap refuses it too (`kb.ann_build`)."""
    complete = progress.live == progress.total
    counts = f"{progress.live}/{progress.total} built"
    failed = f", {progress.failed_count} failed" if progress.failed_count else ""
    if version.pk == kb.active_index_version_id:
        return VersionStatus("active", f"active: serving ({counts})", False)
    if version.state == IndexVersion.State.FAILED:
        return VersionStatus("failed", "failed", False)
    if version.state == IndexVersion.State.RETIRED:
        until = retained_until(version, kb.retention_days)
        if version.collected_at is not None or until is None or until < timezone.now():
            return VersionStatus("collected", "retired; past retention", False)
        active = kb.active_index_version
        newer = active is not None and version.number > active.number
        return VersionStatus(
            "retired",
            f"retired; still built for rollback until {timezone.localtime(until):%Y-%m-%d %H:%M}"
            f" ({counts}{failed})",
            newer and complete,
            until,
        )
    index = ann_index_state(version.pk) if complete else "ready"
    if index != "ready":
        doing = "being built" if index == "building" else "queued"
        return VersionStatus("indexing", f"building index: {counts}, vector index {doing}", False)
    if complete:
        return VersionStatus("ready", f"ready: {counts}", True)
    if progress.building:
        return VersionStatus("building", f"building: {counts}{failed}", False)
    return VersionStatus("incomplete", f"incomplete: {counts}{failed}", False)


def index_version_rollback_target(*, kb: KnowledgeBase) -> IndexVersion | None:
    """Where "Roll back to the previous version" goes: the most recently retired version that is
    still retained (inside the retention window, not collected) and older than the active one.

    Older, because after v1 -> v2 -> rollback to v1 the most recently retired version is v2, and
    going there is going forward again (a swap, offered on v2's row), not back. None when there
    is nothing to go back to; then the rollback is not offered."""
    active = kb.active_index_version
    cutoff = timezone.now() - timedelta(days=kb.retention_days)
    versions = IndexVersion.objects.filter(
        kb_id=kb.pk,
        state=IndexVersion.State.RETIRED,
        retired_at__gte=cutoff,
        collected_at__isnull=True,
    )
    if active is not None:
        versions = versions.filter(number__lt=active.number)
    return versions.order_by("-retired_at", "-number").first()


@dataclass(frozen=True)
class VersionFigures:
    """One index version's side of a comparison: what it serves, or would serve after a swap."""

    version: IndexVersion
    documents: int  # non-deleted documents with a desired revision
    covered: int  # live in this version at their desired revision
    chunks: int  # chunks of those documents' builds pointed at in this version
    avg_chars: float | None
    avg_tokens: float | None
    failed: int
    building: int

    @property
    def missing(self) -> int:
        return self.documents - self.covered


def index_version_figures(*, version: IndexVersion) -> VersionFigures:
    """Coverage, chunks, average chunk size (characters and tokens), failures and running builds
    of `version`, over the knowledge base's non-deleted documents. Four queries."""
    documents = Document.objects.filter(
        kb_id=version.kb_id, deleted_at__isnull=True, desired_revision__isnull=False
    )
    covered = Publication.objects.filter(
        index_version=version,
        document__in=documents,
        build__revision__number=models_F("document__desired_revision"),
    ).count()
    pointed = Publication.objects.filter(index_version=version, document__in=documents)
    chunks = Chunk.objects.filter(
        index_version=version, build_id__in=pointed.values("build_id")
    ).aggregate(n=Count("id"), chars=Avg(Length("text")), tokens=Avg("token_count"))
    builds = Build.objects.filter(index_version=version, document__in=documents).aggregate(
        failed=Count("id", filter=Q(state=Build.State.FAILED)),
        building=Count("id", filter=Q(state__in=RUNNING_BUILD_STATES)),
    )
    return VersionFigures(
        version=version,
        documents=documents.count(),
        covered=covered,
        chunks=chunks["n"],
        avg_chars=chunks["chars"],
        avg_tokens=chunks["tokens"],
        failed=builds["failed"],
        building=builds["building"],
    )


@dataclass(frozen=True)
class VersionComparison:
    """Two index versions side by side (the active one and a candidate) before a swap: settings,
    then figures. `rows` are (label, active, candidate, differs) for a two-column table."""

    active: VersionFigures | None
    candidate: VersionFigures
    rows: list[tuple[str, str, str, bool]]


def _figure_rows(figures: VersionFigures | None) -> list[tuple[str, str]]:
    if figures is None:
        return []

    def avg(value: float | None) -> str:
        return "—" if value is None else f"{value:,.0f}"

    return [
        ("documents covered", f"{figures.covered} of {figures.documents}"),
        ("documents missing", str(figures.missing)),
        ("chunks", f"{figures.chunks:,}"),
        ("average chunk (characters)", avg(figures.avg_chars)),
        ("average chunk (tokens)", avg(figures.avg_tokens)),
        ("failed builds", str(figures.failed)),
        ("builds running", str(figures.building)),
    ]


def index_version_comparison(
    *, active: IndexVersion | None, candidate: IndexVersion
) -> VersionComparison:
    """`index_version_settings` and `index_version_figures` of both versions, row by row, for the
    swap page (and the knowledge base's home and test search)."""
    mine = index_version_figures(version=candidate)
    theirs = index_version_figures(version=active) if active is not None else None
    left = index_version_settings(active) if active else []
    right = index_version_settings(candidate)
    left += _figure_rows(theirs)
    right += _figure_rows(mine)
    values = dict(left)
    rows = [
        (label, values.get(label, "—"), value, values.get(label, value) != value)
        for label, value in right
    ]
    return VersionComparison(active=theirs, candidate=mine, rows=rows)
