"""Reads for a knowledge base's home page: its documents by state, the chunks it serves, its
failures, and how far every index version still receiving builds has got. Counts cover every
document of the knowledge base (they name nothing); lists name only what the reader may read.

"Served" is the visibility rule without a reader's groups: the document's pointer in the active
index version, and the document not deleted (`retrieval.search.visibility.visible_sql`,
`kb.selectors.builds.served_now`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from django.db import connection
from django.db.models import F, Q
from django.utils.translation import gettext, gettext_lazy

from kb import document_states
from kb.failures import build_error_words
from kb.models import Build, Document, IndexVersion, KnowledgeBase
from kb.selectors.index_versions import index_version_progress, index_version_status


@dataclass(frozen=True)
class DocumentCounts:
    documents: int  # not deleted
    served: int  # served by search now
    not_served: int  # not deleted, nothing served yet (first revision building, failed, ...)
    awaiting_approval: int  # the desired revision is built and waits for approval
    building: int  # the desired revision is queued or being built
    failed: int  # the desired revision's build failed
    deleted: int
    chunks_served: int


def knowledge_base_counts(*, kb: KnowledgeBase) -> DocumentCounts:
    """The documents of `kb` by state in its active index version (the document list's status
    filter counts them the same way: `kb.document_states`), and the chunks search serves from
    it. Two queries, O(documents): chunks are counted from the served builds' rows."""
    states = document_states.document_state_counts(Document.objects.filter(kb=kb))
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*) FILTER (WHERE d.deleted_at IS NULL),
                   coalesce(sum(b.expected_chunk_count) FILTER (WHERE d.deleted_at IS NULL), 0)
            FROM kb_document d
            JOIN kb_knowledgebase k ON k.id = d.kb_id
            LEFT JOIN kb_publication p
              ON p.document_id = d.id AND p.index_version_id = k.active_index_version_id
            LEFT JOIN kb_build b ON b.id = p.build_id
            WHERE d.kb_id = %s
            """,
            [kb.pk],
        )
        row = cursor.fetchone()
    assert row is not None
    return DocumentCounts(
        documents=int(row[0]),
        served=states[document_states.SERVED],
        not_served=states[document_states.NOT_SERVED],
        awaiting_approval=states[document_states.AWAITING_APPROVAL],
        building=states[document_states.BUILDING],
        failed=states[document_states.FAILED],
        deleted=states[document_states.DELETED],
        chunks_served=int(row[1]),
    )


@dataclass(frozen=True)
class Failure:
    document_id: int
    key: str
    title: str
    revision: int
    error: str


def knowledge_base_failures(
    *, kb: KnowledgeBase, named: Q | None, limit: int = 10
) -> tuple[list[Failure], int]:
    """Documents whose desired revision failed to build in the active version, newest first:
    those in `named` (the reader's readable documents; None: all) up to `limit`, and how many
    failed in all. Two queries."""
    failed = Build.objects.filter(
        kb=kb,
        index_version_id=kb.active_index_version_id,
        state=Build.State.FAILED,
        document__deleted_at__isnull=True,
        revision__number=F("document__desired_revision"),
    )
    total = failed.count()
    readable = Document.objects.filter(kb=kb) if named is None else Document.objects.filter(named)
    shown = [
        Failure(
            b.document_id,
            b.document.key,
            b.document.title,
            b.revision.number,
            build_error_words(b),
        )
        for b in failed.filter(document__in=readable)
        .select_related("document", "revision")
        .order_by("-updated_at", "-id")[:limit]
    ]
    return shown, total


@dataclass(frozen=True)
class VersionBuilds:
    """How far the builds of the desired revisions got in one index version; for a candidate,
    what it is doing in words (`doing`: "building", "building its vector index", "ready to swap",
    "stuck") and, once nothing runs for it, its status line with the way out (`status`, from
    `kb.selectors.index_versions.index_version_status`, the row on the settings page)."""

    version_id: int
    number: int
    state: str
    active: bool
    total: int  # non-deleted documents with a desired revision
    built: int  # built (served, or ready and waiting for approval)
    running: int  # queued or being built
    failed: int
    doing: str = ""
    status: str = ""

    @property
    def done(self) -> int:
        return self.built + self.failed

    @property
    def percent(self) -> int:
        return 100 if not self.total else (100 * self.done) // self.total

    @property
    def in_progress(self) -> bool:
        return self.running > 0

    @property
    def label(self) -> str:
        words = gettext("%(built)s/%(total)s built") % {"built": self.built, "total": self.total}
        if self.running:
            words += gettext(", %(n)s running") % {"n": self.running}
        if self.failed:
            words += gettext(", %(n)s failed") % {"n": self.failed}
        return words

    def as_json(self) -> dict[str, object]:
        return {
            "version": self.number,
            "state": self.state,
            "active": self.active,
            "total": self.total,
            "built": self.built,
            "running": self.running,
            "failed": self.failed,
            "done": self.done,
            "percent": self.percent,
            "label": self.label,
            "in_progress": self.in_progress,
            "doing": self.doing,
            "status": self.status,
        }


# What a candidate is doing, by `VersionStatus.kind`: never "building" unless something is.
CANDIDATE_DOING = {
    "building": gettext_lazy("building"),
    "indexing": gettext_lazy("building its vector index"),
    "ready": gettext_lazy("ready to swap"),
    "incomplete": gettext_lazy("stuck"),
}


def knowledge_base_build_progress(*, kb: KnowledgeBase) -> list[VersionBuilds]:
    """Per index version that is active or a candidate (building, ready), oldest first: of the
    non-deleted documents' desired revisions, how many are built, running and failed in it. An
    ingest moves the active version's numbers, a re-index a candidate's. A candidate also says
    what it is doing, computed as its row on the settings page is (`index_version_status`): a
    candidate nothing is being built for is ready to swap, or stuck with its way out named. One
    query, and a few per candidate."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT v.id, v.number, v.state, v.id = k.active_index_version_id,
                   count(d.id),
                   count(*) FILTER (WHERE b.state IN ('live', 'ready')),
                   count(*) FILTER (WHERE b.state IN ('pending', 'building')),
                   count(*) FILTER (WHERE b.state = 'failed')
            FROM kb_indexversion v
            JOIN kb_knowledgebase k ON k.id = v.kb_id
            LEFT JOIN kb_document d
              ON d.kb_id = v.kb_id AND d.deleted_at IS NULL AND d.desired_revision IS NOT NULL
            LEFT JOIN kb_revision r ON r.document_id = d.id AND r.number = d.desired_revision
            LEFT JOIN kb_build b ON b.revision_id = r.id AND b.index_version_id = v.id
            WHERE v.kb_id = %s
              AND (v.id = k.active_index_version_id OR v.state IN ('building', 'ready'))
            GROUP BY v.id, v.number, v.state, k.active_index_version_id
            ORDER BY v.number
            """,
            [kb.pk],
        )
        rows = cursor.fetchall()
    progress = [VersionBuilds(*row) for row in rows]
    return [_with_status(builds, kb) if not builds.active else builds for builds in progress]


def _with_status(builds: VersionBuilds, kb: KnowledgeBase) -> VersionBuilds:
    version = IndexVersion.objects.get(pk=builds.version_id)
    status = index_version_status(
        version=version, progress=index_version_progress(version=version), kb=kb
    )
    kind = status.kind
    if builds.running and kind != "building":
        kind = "building"  # builds of older revisions still run: say so, as the bar moves
    doing = str(CANDIDATE_DOING.get(kind, kind))
    return replace(builds, doing=doing, status="" if kind == "building" else str(status.label))
