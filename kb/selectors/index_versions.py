"""Reads of index versions: which receive builds, how far a version's builds got, its settings,
status (ready computed from coverage), the rollback target and two versions side by side."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection
from django.db.models import Avg, Count, Q, QuerySet
from django.db.models import F as models_F
from django.db.models.functions import Length
from django.utils import formats, timezone
from django.utils.translation import gettext, gettext_lazy, ngettext

from kb.ann import ann_index_state
from kb.failures import build_error_words, reason_words
from kb.models import (
    Build,
    Chunk,
    Document,
    IndexVersion,
    KnowledgeBase,
    Publication,
)
from kb.selectors.builds import RUNNING_BUILD_STATES, current_failure_q, retained_until

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
class CoverageEntry:
    """One document a version does not serve at its desired revision: why (`cause`: "building"
    there, "awaiting_approval" there, "waiting" for the active version's own build or approval,
    "failed" there, or "not_built" there), which revision each version serves (None: nothing),
    whether it keeps the swap back, in words, and the way out."""

    document_id: int
    key: str
    title: str
    revision: int  # the desired revision
    cause: str
    error: str
    served_now: int | None  # by the active version
    served_after: int | None  # by this version, after a swap
    blocking: bool
    reason: str
    way_out: str

    @property
    def text(self) -> str:
        return gettext("%(key)s: %(reason)s") % {"key": self.key, "reason": self.reason}


@dataclass(frozen=True)
class Coverage:
    """What a version would serve, document by document, against what the active one serves.

    `tolerated`: documents the version does not serve at their desired revision where the
    active version serves exactly the same (nothing, or the same earlier revision) and has no
    build of them on its way — a file that cannot be parsed fails in every version. `blocking`:
    documents the swap would serve worse (the active version serves them, or will once its build
    or approval is done), or whose build here awaits approval. `running`: builds of desired
    revisions queued or running here."""

    number: int
    active_number: int | None
    total: int  # non-deleted documents with a desired revision
    covered: int  # live in this version at their desired revision
    running: int
    blocking: list[CoverageEntry]
    tolerated: list[CoverageEntry]
    building: list[CoverageEntry]  # the first RUNNING_NAMED of the `running`, by key

    @property
    def swappable(self) -> bool:
        """Covers every document the active version serves: nothing running, nothing worse."""
        return not self.running and not self.blocking

    @property
    def gaps(self) -> list[str]:
        """What keeps the swap back, one line per document: being built, then worse."""
        more = self.running - len(self.building)
        return (
            [entry.text for entry in self.building]
            + (
                [
                    ngettext(
                        "and %(n)s more document being built",
                        "and %(n)s more documents being built",
                        more,
                    )
                    % {"n": more}
                ]
                if more > 0
                else []
            )
            + [entry.text for entry in self.blocking]
        )


RUNNING_NAMED = 50


_DESIRED = """
    FROM kb_document d
    JOIN kb_revision r ON r.document_id = d.id AND r.number = d.desired_revision
    LEFT JOIN kb_build cb ON cb.revision_id = r.id AND cb.index_version_id = %(version)s
    LEFT JOIN kb_publication cp ON cp.document_id = d.id AND cp.index_version_id = %(version)s
    LEFT JOIN kb_build cpb ON cpb.id = cp.build_id
    LEFT JOIN kb_revision cr ON cr.id = cpb.revision_id
"""
_WHERE = "WHERE d.kb_id = %(kb)s AND d.deleted_at IS NULL AND d.desired_revision IS NOT NULL"
_RUNNING = "cb.state IN ('pending', 'building')"


def index_version_coverage(*, version: IndexVersion, kb: KnowledgeBase) -> Coverage:
    """`Coverage` of `version` against `kb`'s active version, from one snapshot of what each
    serves (the Publications search reads, `retrieval.search.visibility`). Three queries at
    most: the counts; the documents not covered and not being built, each judged; and the first
    RUNNING_NAMED being built, to name them. Takes no lock: the swap calls it again under its
    locks (`kb.services.index_versions.index_version_activate`)."""
    active_id = kb.active_index_version_id
    active_number = (
        IndexVersion.objects.filter(pk=active_id).values_list("number", flat=True).first()
        if active_id
        else None
    )
    params = {"version": version.pk, "active": active_id, "kb": version.kb_id}
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT count(*), count(*) FILTER (WHERE cr.number = d.desired_revision),
                       count(*) FILTER (WHERE cr.number IS DISTINCT FROM d.desired_revision
                                          AND {_RUNNING})
                {_DESIRED} {_WHERE}""",  # noqa: S608 (constants)
            params,
        )
        total, covered, running = cursor.fetchone() or (0, 0, 0)
        cursor.execute(
            f"""SELECT d.id, d.key, d.title, d.desired_revision, coalesce(cb.state, 'missing'),
                       coalesce(cb.error, ''), coalesce(cb.error_code, ''),
                       coalesce(cb.error_params, '{{}}')::text, ar.number, cr.number, ab.state
                {_DESIRED}
                LEFT JOIN kb_build ab ON ab.revision_id = r.id AND ab.index_version_id = %(active)s
                LEFT JOIN kb_publication ap
                  ON ap.document_id = d.id AND ap.index_version_id = %(active)s
                LEFT JOIN kb_build apb ON apb.id = ap.build_id
                LEFT JOIN kb_revision ar ON ar.id = apb.revision_id
                {_WHERE}
                  AND cr.number IS DISTINCT FROM d.desired_revision
                  AND (cb.state IS NULL OR NOT {_RUNNING})
                ORDER BY d.key""",  # noqa: S608 (constants)
            params,
        )
        rows = cursor.fetchall()
        building = []
        if running:
            cursor.execute(
                f"""SELECT d.id, d.key, d.title, d.desired_revision, ar.number, cr.number
                    {_DESIRED}
                    LEFT JOIN kb_publication ap
                      ON ap.document_id = d.id AND ap.index_version_id = %(active)s
                    LEFT JOIN kb_build apb ON apb.id = ap.build_id
                    LEFT JOIN kb_revision ar ON ar.id = apb.revision_id
                    {_WHERE} AND {_RUNNING} AND cr.number IS DISTINCT FROM d.desired_revision
                    ORDER BY d.key LIMIT {RUNNING_NAMED}""",  # noqa: S608 (constants)
                params,
            )
            building = [
                CoverageEntry(
                    document_id=document_id,
                    key=key,
                    title=title,
                    revision=desired,
                    cause="building",
                    error="",
                    served_now=served_now,
                    served_after=served_after,
                    blocking=True,
                    reason=gettext("no live build yet (r%(r)s is being built in v%(v)s)")
                    % {"r": desired, "v": version.number},
                    way_out=gettext("wait for it"),
                )
                for document_id, key, title, desired, served_now, served_after in cursor.fetchall()
            ]
    entries = [_coverage_entry(row, version.number, active_number) for row in rows]
    return Coverage(
        number=version.number,
        active_number=active_number,
        total=total,
        covered=covered,
        running=running,
        blocking=[e for e in entries if e.blocking],
        tolerated=[e for e in entries if not e.blocking],
        building=building,
    )


FIX_WAYS = gettext_lazy(
    "retry its build if the failure was temporary (a provider outage), upload a fixed revision on "
    "its page, or delete the document if it is not needed"
)
NOT_BUILT_WAYS = gettext_lazy(
    "upload its file again as a new revision on its page, or delete the document"
)


def _coverage_entry(row: tuple[Any, ...], number: int, active: int | None) -> CoverageEntry:
    """One row of `index_version_coverage`'s second query, judged: would the swap serve this
    document exactly as the active version serves it now?"""
    document_id, key, title, desired, state, stored, code, values, *rest = row
    served_now, served_after, active_state = rest
    error = reason_words(code, json.loads(values), fallback=stored)
    cause = {Build.State.FAILED: "failed", Build.State.READY: "awaiting_approval"}.get(
        state, "not_built"
    )
    here = str(_CAUSE_WORDS[cause]) % {"r": desired, "v": number}
    there = f"v{active}" if active is not None else gettext("no version")
    ways = str(FIX_WAYS if cause == "failed" else NOT_BUILT_WAYS)

    def entry(blocking: bool, reason: str, way_out: str, why: str = cause) -> CoverageEntry:
        return CoverageEntry(
            document_id=document_id,
            key=key,
            title=title,
            revision=desired,
            cause=why,
            error=error,
            served_now=served_now,
            served_after=served_after,
            blocking=blocking,
            reason=reason,
            way_out=way_out,
        )

    if cause == "awaiting_approval":
        return entry(True, here, gettext("approve it on its page, or upload a new revision"))
    if active_state in (Build.State.PENDING, Build.State.BUILDING, Build.State.READY):
        reason = (
            gettext("%(here)s, while it awaits approval in %(there)s")
            if active_state == Build.State.READY
            else gettext("%(here)s, while it is being built in %(there)s")
        )
        return entry(
            True,
            reason % {"here": here, "there": there},
            gettext("wait until that is done in %(there)s") % {"there": there},
            "waiting",
        )
    words = {"here": here, "there": there, "now": served_now, "after": served_after, "v": number}
    if served_now == served_after:
        if served_now is None:
            return entry(
                False, gettext("%(here)s; %(there)s does not serve it either") % words, ways
            )
        return entry(
            False, gettext("%(here)s; %(there)s serves r%(now)s, and so will v%(v)s") % words, ways
        )
    if served_now is None:
        return entry(
            True,
            gettext("%(here)s; %(there)s serves nothing of it, v%(v)s would serve r%(after)s")
            % words,
            ways,
        )
    reason = (
        gettext("%(here)s, but %(there)s serves r%(now)s: the swap would stop serving it")
        if served_after is None
        else gettext(
            "%(here)s, but %(there)s serves r%(now)s: the swap would serve r%(after)s instead"
        )
    )
    return entry(True, reason % words, ways)


# "r3 failed in v2": the revision (r) and the version (v) filled in.
_CAUSE_WORDS = {
    "failed": gettext_lazy("r%(r)s failed in v%(v)s"),
    "awaiting_approval": gettext_lazy("r%(r)s awaits approval in v%(v)s"),
    "not_built": gettext_lazy("r%(r)s was not built in v%(v)s"),
}


@dataclass(frozen=True)
class VersionProgress:
    total: int
    live: int
    building: int
    failed: list[str]
    failed_count: int = 0  # every failed build, named in `failed` or not
    # against the active version (`index_version_coverage`); None for the active one itself
    coverage: Coverage | None = None


def index_version_progress(*, version: IndexVersion, named: Q | None = None) -> VersionProgress:
    """Documents built (live in this version at their desired revision) out of all documents,
    and, for a version not active, its `Coverage`. Failures of documents outside `named` (those
    the reader may not read) are counted in one line, not named."""
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
    failures = builds.filter(current_failure_q())  # an older revision's failure is history
    shown = failures if named is None else failures.filter(document__in=documents.filter(named))
    failed = [
        f"{b.document.key} r{b.revision.number}: {build_error_words(b)}"
        for b in shown.select_related("document", "revision")
    ]
    hidden = 0 if named is None else failures.count() - len(failed)
    failed_count = len(failed) + hidden
    if hidden:
        failed.append(
            gettext("%(n)s failed in documents of access groups you do not hold") % {"n": hidden}
        )
    building = builds.filter(state__in=[Build.State.PENDING, Build.State.BUILDING]).count()
    kb = KnowledgeBase.objects.get(pk=version.kb_id)
    coverage = (
        None
        if kb.active_index_version_id == version.pk
        else index_version_coverage(version=version, kb=kb)
    )
    return VersionProgress(
        total=total,
        live=live,
        building=building,
        failed=failed,
        failed_count=failed_count,
        coverage=coverage,
    )


# The settings' names, by the key `index_version_settings` orders them with.
SETTING_LABELS = {
    "provider": gettext_lazy("provider"),
    "model": gettext_lazy("model"),
    "dimensions": gettext_lazy("dimensions"),
    "metric": gettext_lazy("metric"),
    "chunk size": gettext_lazy("chunk size"),
    "chunk overlap": gettext_lazy("chunk overlap"),
    "pipeline": gettext_lazy("pipeline"),
    "vector storage": gettext_lazy("vector storage"),
    "English list": gettext_lazy("English list"),
}


def index_version_settings(version: IndexVersion) -> list[tuple[str, str]]:
    """What makes one index version differ from another, as (label, value) rows; the labels
    are SETTING_LABELS' in the active language."""
    values = {
        "provider": version.provider,
        "model": version.model,
        "dimensions": str(version.dimensions),
        "metric": version.metric,
        "chunk size": str(version.chunk_size),
        "chunk overlap": str(version.chunk_overlap),
        "pipeline": version.pipeline_version,
        "vector storage": version.vector_storage,
        "English list": (
            f"{version.english_provider}/{version.english_model} · {version.english_dimensions}d"
            if version.english_list
            else gettext("none")
        ),
    }
    return [(str(SETTING_LABELS[key]), value) for key, value in values.items()]


def index_version_settings_line(version: IndexVersion) -> str:
    """The settings in one line: "hash/canon-hash-v1 · 384d cosine · chunks 800/100 · p2"."""
    return (
        f"{version.provider}/{version.model} · {version.dimensions}d {version.metric} · "
        f"chunks {version.chunk_size}/{version.chunk_overlap} · {version.pipeline_version}"
        + (f" · {version.vector_storage}" if version.vector_storage != "vector" else "")
        + (f" · English list {version.english_model}" if version.english_list else "")
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
        "english_list": (
            {
                "provider": version.english_provider,
                "model": version.english_model,
                "dimensions": version.english_dimensions,
            }
            if version.english_list
            else None
        ),
    }


@dataclass(frozen=True)
class VersionStatus:
    """What an index version is doing, for its row: `kind` is "active", "ready", "building",
    "indexing" (every document built, its vector index being built: `kb.ann_build`),
    "incomplete" (nothing running, and the swap would serve some document worse: the label says
    what to do), "retired", "collected" or "failed"; `swappable`: "Approve swap…" may be offered
    (and accepted)."""

    kind: str
    label: str
    swappable: bool
    retained_until: Any = None


def coverage_way_out(coverage: Coverage) -> str:
    """What keeps a version from being swapped in although nothing is being built for it, and
    what to do, in one line: "1 failed that v1 serves: retry, fix or delete it"."""
    there = (
        f"v{coverage.active_number}" if coverage.active_number else gettext("the active version")
    )
    counts = {
        cause: sum(1 for e in coverage.blocking if e.cause == cause)
        for cause in ("failed", "awaiting_approval", "waiting", "not_built")
    }
    words = {
        "failed": lambda n: ngettext(
            "%(n)s failed that %(there)s serves: retry, fix or delete it",
            "%(n)s failed that %(there)s serves: retry, fix or delete them",
            n,
        ),
        "awaiting_approval": lambda n: ngettext(
            "%(n)s awaiting approval: approve it", "%(n)s awaiting approval: approve them", n
        ),
        "waiting": lambda n: ngettext(
            "%(n)s still building or awaiting approval in %(there)s: wait",
            "%(n)s still building or awaiting approval in %(there)s: wait",
            n,
        ),
        "not_built": lambda n: ngettext(
            "%(n)s not built here: upload it again or delete it",
            "%(n)s not built here: upload them again or delete them",
            n,
        ),
    }
    return gettext("; ").join(
        words[cause](n) % {"n": n, "there": there} for cause, n in counts.items() if n
    )


def index_version_status(
    *, version: IndexVersion, progress: VersionProgress, kb: KnowledgeBase
) -> VersionStatus:
    """The state an index version is shown in, computed from coverage rather than stored.

    Readiness is computed here, not kept in `IndexVersion.state`: nothing moves a version to
    READY, and a stored READY would go stale at the next upload (which makes the version
    incomplete again until that revision is built into it). A candidate is *ready* exactly when
    the swap's own check (`progress.coverage`, `index_version_coverage`) passes: nothing is
    being built for it, and it serves every document as the active version does — at its
    desired revision, or, where that failed in both (a file no version can parse), exactly what
    the active one serves (nothing, or the same earlier revision). A retired version still inside
    the retention window keeps receiving builds of new uploads (`live_index_versions`), so a
    rollback to it never serves stale text; a newer one (rolled back from) may be swapped in
    again. A candidate whose builds are written but whose vector index does not exist yet or is
    being built is *building index*, not ready: the swap refuses it too (`kb.ann_build`). A
    candidate with nothing running that is not ready is *incomplete*, and its label names the way
    out (`coverage_way_out`)."""
    coverage = progress.coverage
    complete = coverage.swappable if coverage else progress.live == progress.total
    counts = gettext("%(live)s/%(total)s built") % {"live": progress.live, "total": progress.total}
    failed = (
        gettext(", %(n)s failed") % {"n": progress.failed_count} if progress.failed_count else ""
    )
    if version.pk == kb.active_index_version_id:
        return VersionStatus(
            "active", gettext("active: serving (%(counts)s)") % {"counts": counts}, False
        )
    if version.state == IndexVersion.State.FAILED:
        return VersionStatus("failed", gettext("failed"), False)
    if version.state == IndexVersion.State.RETIRED:
        until = retained_until(version, kb.retention_days)
        if version.collected_at is not None or until is None or until < timezone.now():
            return VersionStatus("collected", gettext("retired; past retention"), False)
        active = kb.active_index_version
        newer = active is not None and version.number > active.number
        return VersionStatus(
            "retired",
            gettext("retired; still built for rollback until %(until)s (%(counts)s%(failed)s)")
            % {
                "until": formats.date_format(timezone.localtime(until), "Y-m-d H:i"),
                "counts": counts,
                "failed": failed,
            },
            newer and complete,
            until,
        )
    index = ann_index_state(version.pk) if complete else "ready"
    if index != "ready":
        label = (
            gettext("building index: %(counts)s, vector index being built")
            if index == "building"
            else gettext("building index: %(counts)s, vector index queued")
        )
        return VersionStatus("indexing", label % {"counts": counts}, False)
    if complete:
        known = len(coverage.tolerated) if coverage else 0
        label = gettext("ready: %(counts)s") % {"counts": counts}
        if known and coverage and coverage.active_number:
            label = gettext("ready: %(counts)s; %(n)s failed as in v%(v)s") % {
                "counts": counts,
                "n": known,
                "v": coverage.active_number,
            }
        elif known:
            label = gettext("ready: %(counts)s; %(n)s failed") % {"counts": counts, "n": known}
        return VersionStatus("ready", label, True)
    running = coverage.running if coverage else progress.building
    if running:
        return VersionStatus(
            "building",
            gettext("building: %(counts)s%(failed)s") % {"counts": counts, "failed": failed},
            False,
        )
    way_out = coverage_way_out(coverage) if coverage else ""
    return VersionStatus(
        "incomplete",
        gettext("incomplete: %(counts)s%(rest)s")
        % {
            "counts": counts,
            "rest": gettext("; %(way)s") % {"way": way_out} if way_out else failed,
        },
        False,
    )


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
        failed=Count("id", filter=current_failure_q()),
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
        (
            gettext("documents covered"),
            gettext("%(n)s of %(of)s") % {"n": figures.covered, "of": figures.documents},
        ),
        (gettext("documents missing"), str(figures.missing)),
        (gettext("chunks"), f"{figures.chunks:,}"),
        (gettext("average chunk (characters)"), avg(figures.avg_chars)),
        (gettext("average chunk (tokens)"), avg(figures.avg_tokens)),
        (gettext("failed builds"), str(figures.failed)),
        (gettext("builds running"), str(figures.building)),
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
