"""Reads of knowledge-base state. No function here writes."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Avg, Count, Exists, OuterRef, Q, QuerySet
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
    TenantMembership,
)
from kb.roles import role_noun, roles_with

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


def knowledge_bases_for_tenant(*, tenant_id: int) -> QuerySet[KnowledgeBase]:
    return KnowledgeBase.objects.filter(tenant_id=tenant_id).order_by("slug")


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


def awaiting_approval_words() -> str:
    """ "awaiting approval by an index admin": who approves, from the roles (`kb.roles`)."""
    approvers = roles_with("kb.approve_build")
    return "awaiting approval" + (f" by {role_noun(approvers[-1])}" if approvers else "")


def document_status(*, document: Document) -> str:
    """One line for people: what is live (what search serves now, `served_now`), and what is
    happening to the desired revision; for a deleted document, that nothing is served and which
    revision is kept for restore."""
    if document.deleted_at is not None:
        kept = (
            Publication.objects.filter(
                document=document, index_version_id=document.kb.active_index_version_id
            )
            .values_list("build__revision__number", flat=True)
            .first()
        )
        return "deleted · nothing served" + (f" · r{kept} kept for restore" if kept else "")
    live = live_build(document=document)
    parts = [f"live r{live.revision.number}" if live else "not live"]
    if document.desired_revision and (
        live is None or live.revision.number != document.desired_revision
    ):
        pending = (
            Build.objects.filter(
                document=document,
                revision__number=document.desired_revision,
                index_version_id=document.kb.active_index_version_id,
            )
            .only("state", "error")
            .first()
        )
        if pending is not None:
            state = {"ready": awaiting_approval_words()}.get(pending.state, pending.state)
            detail = (
                f": {pending.error}"
                if pending.state == Build.State.FAILED and pending.error
                else ""
            )
            parts.append(f"r{document.desired_revision} {state}{detail}")
    return " · ".join(parts)


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


def build_progress_of(*, build: Build) -> dict[str, object]:
    """One build's progress: its stage, counts, the bar's percent and the words beside it.

    Stages: "queued", "parsing" (no expected count yet), "embedding" (fewer chunks with vectors
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
        label = stage if build.state in RUNNING_BUILD_STATES else "?"
    elif stage == "embedding":
        label = f"embedding {embedded}/{expected}"
    elif build.state in RUNNING_BUILD_STATES:
        label = f"{stage} {written}/{expected}"
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
        "error": build.error,
    }


def build_progress(*, document: Document) -> list[dict[str, object]]:
    """Per build of the document, newest revision first: `build_progress_of`. One query."""
    return [build_progress_of(build=b) for b in document_builds(document=document)]


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


# --- who may read what: one rule for the admin and the API --------------------------------------


@dataclass(frozen=True)
class Reader:
    """A session user's view: their tenant and the access groups they hold (`all_groups`: every
    group, for superusers). `retrieval.principals.principal_from_user` builds the API's
    principal from it, and the admin scopes its pages by it, so the two never disagree."""

    tenant_id: int
    access_groups: frozenset[str]
    all_groups: bool = False


def reader_of_user(user: Any) -> Reader | None:
    """The tenant and access groups of an authenticated user (their TenantMembership); None
    without one. Superusers read every access group."""
    if user is None or not user.is_authenticated:
        return None
    membership = TenantMembership.objects.filter(user_id=user.pk).first()
    if membership is None:
        return None
    return Reader(
        tenant_id=membership.tenant_id,
        access_groups=frozenset(membership.access_groups),
        all_groups=bool(getattr(user, "is_superuser", False)),
    )


def may_read_groups(
    *, groups: Iterable[str], access_groups: Collection[str], all_groups: bool
) -> bool:
    """The access-group rule for one document: readable when the caller reads every group, the
    document has none, or the caller holds at least one of them."""
    groups = set(groups)
    return all_groups or not groups or bool(groups & set(access_groups))


def readable_documents_q(*, access_groups: Collection[str], all_groups: bool, path: str = "") -> Q:
    """`may_read_groups` as a filter on documents, or on rows that reach a document through
    `path` ("document", "task__document"); rows with no document there stay in."""
    if all_groups:
        return Q()
    prefix = f"{path}__" if path else ""
    readable = Q(**{f"{prefix}access_groups": []})
    if access_groups:
        readable |= Q(**{f"{prefix}access_groups__overlap": sorted(access_groups)})
    return Q(**{f"{path}__isnull": True}) | readable if path else readable


def access_groups_not_held(
    *, groups: Iterable[str], access_groups: Collection[str], all_groups: bool
) -> list[str]:
    """The groups in `groups` a caller may not put a document behind: those it does not hold
    (none for callers that read every group), so it never writes what it could not read back."""
    return [] if all_groups else sorted(set(groups) - set(access_groups))


def access_groups_clearing_refused(
    *, before: Iterable[str], after: Iterable[str], access_groups: Collection[str], all_groups: bool
) -> str | None:
    """Removing every group of a restricted document makes it readable by everyone in the
    tenant, so only a caller who holds all of them may: why this change is refused (None:
    allowed, or not a clearing). Narrowing a document's groups is allowed."""
    if all_groups or set(after) or not set(before):
        return None
    missing = sorted(set(before) - set(access_groups))
    if not missing:
        return None
    return (
        "Only a holder of every group of a restricted document may make it readable by "
        f"everyone; you do not hold: {', '.join(missing)}."
    )


# --- what is served, and what each build is for: one truth for every page ------------------------
#
# Search serves a build when its Publication is the document's pointer in the knowledge base's
# active index version and the document is not deleted (`retrieval.search.visibility`, with
# the reader's access groups on top). Every admin page that says what is served, or what a build is
# for, asks `build_roles` / `served_now`, which read exactly those facts.


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
    "superseded",
)


def served_now(*, document: Document) -> Build | None:
    """The build search returns for `document` now (to a reader of its groups): `live_build`."""
    return live_build(document=document)


def _retained_until(version: IndexVersion, retention_days: int) -> Any:
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
                return BuildRole("served", "served now")
            return BuildRole("kept_for_restore", "kept for restore (document deleted)")
        if version.state == IndexVersion.State.RETIRED:
            until = _retained_until(version, kb.retention_days)
            if version.collected_at is None and until and until >= (now or timezone.now()):
                return BuildRole(
                    "kept_for_rollback", f"kept for rollback (retired v{version.number})"
                )
            return BuildRole("retired", f"retired v{version.number}, past retention")
        return BuildRole("candidate", f"candidate (v{version.number}, not active)")
    if build.state in RUNNING_BUILD_STATES:
        return BuildRole("building", str(build_progress_of(build=build)["label"]))
    if build.state == Build.State.READY:
        return BuildRole("awaiting_approval", "awaiting approval")
    if build.state == Build.State.FAILED:
        return BuildRole("failed", f"failed: {build.error}" if build.error else "failed")
    if build.collected_at is not None:
        return BuildRole("superseded", "superseded (chunks collected)")
    return BuildRole("superseded", "superseded")


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


def document_build_rows(*, document: Document) -> list[tuple[Build, dict[str, Any]]]:
    """Per build of `document`, newest revision first: the build and its progress
    (`build_progress_of`) with its role ("role", "role_kind") and, once it is not running, its
    chunks ("6/6 chunks"; while it runs the role says "embedding 3/6"). One query."""
    builds = builds_with_roles(Build.objects.filter(document=document)).order_by(
        "-revision__number", "index_version__number"
    )
    now = timezone.now()
    rows = []
    for build in builds:
        role = build_role_of(build=build, now=now)
        progress = build_progress_of(build=build)
        chunks = "" if role.kind == "building" else f"{progress['label']} chunks"
        rows.append(
            (build, {**progress, "role": role.label, "role_kind": role.kind, "chunks": chunks})
        )
    return rows


def document_progress(*, document: Document) -> dict[str, Any]:
    """Everything the document page shows about state, from one reading: the status line, the
    build served now and every build's progress and role (`document_build_rows`). The page is
    rendered from it and its script refreshes every box from it (the progress JSON)."""
    rows = document_build_rows(document=document)
    served = next((p for _, p in rows if p["role_kind"] == "served"), None)
    return {
        "status": document_status(document=document),
        "served": ({k: served[k] for k in ("id", "revision", "index_version")} if served else None),
        "builds": [p for _, p in rows],
    }


# --- index versions: settings, state, comparison ----------------------------------------------


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
        until = _retained_until(version, kb.retention_days)
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
