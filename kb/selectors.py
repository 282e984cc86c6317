"""Reads of knowledge-base state. No function here writes."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection
from django.db.models import F as models_F
from django.db.models import Q, QuerySet
from django.utils import timezone

from kb.models import Build, Document, IndexVersion, KnowledgeBase, Publication, TenantMembership

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

    def problems(self, *, expected_count: int | None, dimensions: int, manifest: str) -> list[str]:
        """Reasons this build may not be switched live; empty when complete."""
        problems = []
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


def build_completeness(*, build_id: int) -> Completeness:
    """Facts about a build's chunks, read in the caller's transaction (and snapshot)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*), count(embedding), count(DISTINCT ordinal), min(ordinal), max(ordinal),
                   min(vector_dims(embedding)), max(vector_dims(embedding)),
                   encode(sha256(convert_to(coalesce(
                       string_agg(content_hash, ',' ORDER BY ordinal), ''), 'UTF8')), 'hex')
            FROM kb_chunk WHERE build_id = %s
            """,
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
    import hashlib

    return hashlib.sha256(",".join(content_hashes).encode()).hexdigest()


def document_status(*, document: Document) -> str:
    """One line for people: what is live, and what is happening to the desired revision."""
    if document.deleted_at is not None:
        return "deleted"
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
            state = {"ready": "awaiting approval"}.get(pending.state, pending.state)
            detail = (
                f": {pending.error}"
                if pending.state == Build.State.FAILED and pending.error
                else ""
            )
            parts.append(f"r{document.desired_revision} {state}{detail}")
    return " · ".join(parts)


@dataclass(frozen=True)
class BuildDiff:
    """What approving `candidate` would change compared with what is live."""

    live: Build | None
    candidate: Build
    added: int
    removed: int
    unchanged: int
    text_diff: list[str]


def _chunk_texts(build_id: int) -> list[tuple[str, str]]:
    from kb.models import Chunk

    return list(
        Chunk.objects.filter(build_id=build_id)
        .order_by("ordinal")
        .values_list("content_hash", "text")
    )


def build_diff(*, candidate: Build, live: Build | None, max_lines: int = 200) -> BuildDiff:
    """Chunk-level counts (by content hash) and a unified text diff preview."""
    import difflib

    new = _chunk_texts(candidate.pk)
    old = _chunk_texts(live.pk) if live else []
    new_hashes = [h for h, _ in new]
    old_hashes = [h for h, _ in old]
    unchanged = len(set(new_hashes) & set(old_hashes))
    diff = list(
        difflib.unified_diff(
            "\n".join(t for _, t in old).splitlines(),
            "\n".join(t for _, t in new).splitlines(),
            fromfile=f"live r{live.revision.number}" if live else "nothing live",
            tofile=f"r{candidate.revision.number}",
            lineterm="",
            n=1,
        )
    )
    return BuildDiff(
        live=live,
        candidate=candidate,
        added=len(set(new_hashes) - set(old_hashes)),
        removed=len(set(old_hashes) - set(new_hashes)),
        unchanged=unchanged,
        text_diff=diff[:max_lines],
    )


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
    if hidden:
        failed.append(f"{hidden} failed in documents of access groups you do not hold")
    building = builds.filter(state__in=[Build.State.PENDING, Build.State.BUILDING]).count()
    return VersionProgress(total=total, live=live, building=building, failed=failed)


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


def access_groups_cleared_not_held(
    *, before: Iterable[str], after: Iterable[str], access_groups: Collection[str], all_groups: bool
) -> list[str]:
    """Removing every group of a restricted document makes it readable by everyone in the
    tenant, so only a caller who holds all of them may: the groups it had that the caller does
    not hold (empty: allowed, or not a clearing). Narrowing a document's groups is allowed."""
    if all_groups or set(after) or not set(before):
        return []
    return sorted(set(before) - set(access_groups))
