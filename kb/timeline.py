"""A knowledge base's timeline: what people and the pipeline did to it, newest first.

One list merged from four records: uploads and new revisions (Revision, with who uploaded),
pointer changes (PublicationEvent: publish, approve, rollback, delete, restore), index-version
work, retries and other people's actions (AuditEvent: created, swap, version rollback, build
retry, a bulk metadata edit of one document, the answer to a sync's held deletions, a quality
gate overridden or changed — `kb.audit_kinds` — with who and why) and settings changes (Django
admin's LogEntry of the knowledge base, with its change message).
The reconciler's records (`anomaly:*`, `reconciler_pass`, `lease_expired`) are not admin
actions and stay out.

A pointer change is listed only in the index version that was active when it happened: the
builds a re-index publishes into a candidate change nothing search serves, and appear as the
version's creation and swap instead.

Scoping: an entry about a document the reader may not read is kept (so the timeline does not
lie about how much happened) but says only what happened and when: "a document you cannot
read", with no key, title, file name, reason or person.

A page is two queries whatever its size: the knowledge base's swaps (to know which version
was active when), and one UNION ALL of the four records, each read newest first up to the page
size past the cursor, joined to the names it shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils.translation import gettext_lazy

from kb import audit_kinds
from kb.access import Reader, may_read_groups
from kb.models import KnowledgeBase
from work.models import AuditEvent

# The admin actions AuditEvent records about a knowledge base (everything else is a repair).
AUDIT_KINDS = (
    "index_version_created",
    "index_version_swap",
    "index_version_rollback",
    "build_retry",
    audit_kinds.METADATA_SET,
    *audit_kinds.SYNC_ANSWERS,
    audit_kinds.QUALITY_GATE_OVERRIDDEN,
    audit_kinds.QUALITY_GATE_CHANGED,
    audit_kinds.FUSION_CALIBRATION_ADOPTED,
    audit_kinds.FUSION_CALIBRATION_ROLLED_BACK,
)
SWAP_KINDS = ("index_version_swap", "index_version_rollback")
PAGE_SIZE = 25
MAX_PAGE_SIZE = 200

# The order of sources among entries of the same instant (newest first within it).
_REVISION, _POINTER, _AUDIT, _SETTINGS = 1, 2, 3, 4
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_LABELS = {
    "upload": gettext_lazy("uploaded"),
    "revision": gettext_lazy("new revision"),
    "publish": gettext_lazy("published"),
    "approve": gettext_lazy("approved"),
    "rollback": gettext_lazy("rolled back"),
    "delete": gettext_lazy("deleted"),
    "restore": gettext_lazy("restored"),
    "index_version_created": gettext_lazy("new index version"),
    "index_version_swap": gettext_lazy("swapped the index version"),
    "index_version_rollback": gettext_lazy("rolled the index version back"),
    "build_retry": gettext_lazy("retried a build"),
    audit_kinds.METADATA_SET: gettext_lazy("set metadata"),
    audit_kinds.SYNC_DELETIONS_CONFIRMED: gettext_lazy("confirmed a sync's deletions"),
    audit_kinds.SYNC_DELETIONS_KEPT: gettext_lazy("kept what a sync would delete"),
    audit_kinds.QUALITY_GATE_OVERRIDDEN: gettext_lazy("overrode the quality gate"),
    audit_kinds.QUALITY_GATE_CHANGED: gettext_lazy("changed the quality gate"),
    audit_kinds.FUSION_CALIBRATION_ADOPTED: gettext_lazy("adopted a search calibration"),
    audit_kinds.FUSION_CALIBRATION_ROLLED_BACK: gettext_lazy(
        "rolled search back to the default fusion"
    ),
    "settings_added": gettext_lazy("created the knowledge base"),
    "settings_changed": gettext_lazy("changed settings"),
}


@dataclass(frozen=True)
class TimelineEntry:
    at: datetime
    kind: str  # a key of _LABELS
    label: str
    actor: str | None  # a username; None: nobody (the pipeline) or not shown
    document_id: int | None  # None: not about a document, or one the reader may not read
    document_key: str
    document_title: str
    hidden: bool  # about a document the reader may not read
    revision: int | None
    version: int | None  # the index version the entry is about
    previous_version: int | None  # a swap's previous active version
    detail: str  # a file name, an audit entry's action, a settings change message
    reason: str
    cursor: str  # pass as `before` for the entries older than this one

    @property
    def by_pipeline(self) -> bool:
        """A build that went live by itself (no approval needed): no person did it."""
        return self.actor is None and not self.hidden and self.kind == "publish"


@dataclass(frozen=True)
class TimelinePage:
    entries: list[TimelineEntry]
    older: str | None  # the cursor of the next (older) page; None at the beginning


def _cursor(at: datetime, source: int, row_id: int) -> str:
    micros = (at - _EPOCH) // timedelta(microseconds=1)
    return f"{micros}.{source}.{row_id}"


def parse_cursor(value: str | None) -> tuple[datetime, int, int] | None:
    """A cursor made by this module, or None for anything else (the first page)."""
    parts = (value or "").split(".")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() and len(p) < 19 for p in parts):
        return None
    micros, source, row_id = (int(p) for p in parts)
    try:
        at = _EPOCH + timedelta(microseconds=micros)
    except OverflowError:
        return None
    return at, source, row_id


def _active_intervals(kb: KnowledgeBase) -> tuple[list[int], list[Any], list[Any]]:
    """Which index version was active when, from the swap audit trail (as
    `retrieval.search.history.index_version_at` reads it): parallel lists of version id, from, to
    (None: unbounded)."""
    swaps = list(
        AuditEvent.objects.filter(kb=kb, kind__in=SWAP_KINDS, subject_type="index_version")
        .order_by("detected_at", "id")
        .values_list("detected_at", "subject_id", "details")
    )
    if not swaps:
        return [kb.active_index_version_id or 0], [None], [None]
    first_previous = (swaps[0][2] or {}).get("previous_id")
    versions: list[int] = [first_previous if isinstance(first_previous, int) else 0]
    starts: list[Any] = [None]
    ends: list[Any] = [swaps[0][0]]
    for i, (at, version_id, _) in enumerate(swaps):
        versions.append(version_id or 0)
        starts.append(at)
        ends.append(swaps[i + 1][0] if i + 1 < len(swaps) else None)
    return versions, starts, ends


def _page_sql(*, user_table: str, log_table: str) -> str:
    window = "(%(at)s::timestamptz IS NULL OR ({at}, {src}, {id}) < (%(at)s, %(src)s, %(id)s))"
    return f"""
    WITH page AS (
      (SELECT r.created_at AS at, {_REVISION} AS src, r.id, r.uploaded_by_id AS actor_id,
              r.document_id, r.number AS revision, NULL::bigint AS version_id,
              NULL::bigint AS previous_version_id, '' AS kind, r.original_name AS detail,
              '' AS reason
       FROM kb_revision r JOIN kb_document rd ON rd.id = r.document_id
       WHERE rd.kb_id = %(kb)s AND {window.format(at="r.created_at", src=_REVISION, id="r.id")}
       ORDER BY r.created_at DESC, r.id DESC LIMIT %(n)s)
      UNION ALL
      (SELECT e.created_at, {_POINTER}, e.id, e.actor_id, e.document_id, e.revision_number,
              e.index_version_id, NULL, e.action, '', e.reason
       FROM kb_publicationevent e
       WHERE e.kb_id = %(kb)s AND {window.format(at="e.created_at", src=_POINTER, id="e.id")}
         AND (e.index_version_id IS NULL OR EXISTS (
           SELECT 1 FROM unnest(%(iv)s::bigint[], %(from)s::timestamptz[],
                                %(to)s::timestamptz[]) AS s(iv, f, t)
           WHERE s.iv = e.index_version_id AND (s.f IS NULL OR e.created_at >= s.f)
             AND (s.t IS NULL OR e.created_at < s.t)))
       ORDER BY e.created_at DESC, e.id DESC LIMIT %(n)s)
      UNION ALL
      (SELECT a.detected_at, {_AUDIT}, a.id, a.actor_id,
              CASE WHEN a.subject_type = 'document' THEN a.subject_id ELSE ab.document_id END,
              ar.number,
              CASE WHEN a.subject_type = 'index_version' THEN a.subject_id
                   ELSE ab.index_version_id END,
              CASE WHEN jsonb_typeof(a.details -> 'previous_id') = 'number'
                   THEN (a.details ->> 'previous_id')::bigint END,
              a.kind, a.action, coalesce(a.details ->> 'reason', '')
       FROM ingestion_auditevent a
       LEFT JOIN kb_build ab ON a.subject_type = 'build' AND ab.id = a.subject_id
       LEFT JOIN kb_revision ar ON ar.id = ab.revision_id
       WHERE a.kb_id = %(kb)s AND a.kind = ANY(%(kinds)s::varchar[])
         AND {window.format(at="a.detected_at", src=_AUDIT, id="a.id")}
       ORDER BY a.detected_at DESC, a.id DESC LIMIT %(n)s)
      UNION ALL
      (SELECT l.action_time, {_SETTINGS}, l.id, l.user_id, NULL, NULL, NULL, NULL,
              l.action_flag::text, l.change_message, ''
       FROM {log_table} l
       WHERE l.content_type_id = (SELECT id FROM django_content_type
                                  WHERE app_label = 'kb' AND model = 'knowledgebase')
         AND l.object_id = %(kb_text)s AND l.action_flag IN ({ADDITION}, {CHANGE})
         AND {window.format(at="l.action_time", src=_SETTINGS, id="l.id")}
       ORDER BY l.action_time DESC, l.id DESC LIMIT %(n)s)
    )
    SELECT page.at, page.src, page.id, page.kind, page.revision, page.detail, page.reason,
           page.document_id, u.username, d.key, d.title, d.access_groups, v.number, pv.number
    FROM page
    LEFT JOIN {user_table} u ON u.id = page.actor_id
    LEFT JOIN kb_document d ON d.id = page.document_id
    LEFT JOIN kb_indexversion v ON v.id = page.version_id
    LEFT JOIN kb_indexversion pv ON pv.id = page.previous_version_id
    ORDER BY page.at DESC, page.src DESC, page.id DESC
    LIMIT %(n)s
    """  # noqa: S608 (table names and integer constants only; values are bound)


def _kind(source: int, raw: str, revision: int | None) -> str:
    if source == _REVISION:
        return "upload" if revision == 1 else "revision"
    if source == _SETTINGS:
        return "settings_added" if raw == str(ADDITION) else "settings_changed"
    return raw


# What an audit entry stores as its action, in the reader's words where it is a fixed word.
_AUDIT_DETAILS = {"requeued": gettext_lazy("requeued")}


def _detail(source: int, raw: str) -> str:
    if source == _SETTINGS:
        return str(LogEntry(change_message=raw).get_change_message())
    if source == _AUDIT:
        return str(_AUDIT_DETAILS.get(raw, raw))
    return raw


def kb_timeline(
    *, kb: KnowledgeBase, reader: Reader, before: str | None = None, limit: int = PAGE_SIZE
) -> TimelinePage:
    """The entries of `kb` older than the cursor `before` (None: the newest), at most `limit`,
    newest first; what `reader` may not read is not named (module docstring). Two queries."""
    limit = max(1, min(limit, MAX_PAGE_SIZE))
    cursor = parse_cursor(before)
    versions, starts, ends = _active_intervals(kb)
    sql = _page_sql(
        user_table=connection.ops.quote_name(get_user_model()._meta.db_table),
        log_table=connection.ops.quote_name(LogEntry._meta.db_table),
    )
    params: dict[str, Any] = {
        "kb": kb.pk,
        "kb_text": str(kb.pk),
        "kinds": list(AUDIT_KINDS),
        "iv": versions,
        "from": starts,
        "to": ends,
        "at": cursor[0] if cursor else None,
        "src": cursor[1] if cursor else 0,
        "id": cursor[2] if cursor else 0,
        "n": limit + 1,
    }
    with connection.cursor() as db:
        db.execute(sql, params)
        rows = db.fetchall()
    entries = [_entry(row, reader) for row in rows[:limit]]
    older = entries[-1].cursor if len(rows) > limit else None
    return TimelinePage(entries=entries, older=older)


def _entry(row: tuple[Any, ...], reader: Reader) -> TimelineEntry:
    (at, source, row_id, raw_kind, revision, detail, reason, document_id, username, key, title) = (
        row[:11]
    )
    groups, version, previous_version = row[11:]
    hidden = document_id is not None and not may_read_groups(
        groups=groups or [], access_groups=reader.access_groups, all_groups=reader.all_groups
    )
    kind = _kind(source, raw_kind, revision)
    return TimelineEntry(
        at=at,
        kind=kind,
        label=str(_LABELS.get(kind, kind.replace("_", " "))),
        actor=None if hidden else username,
        document_id=None if hidden else document_id,
        document_key="" if hidden or key is None else key,
        document_title="" if hidden or title is None else title,
        hidden=hidden,
        revision=None if hidden else revision,
        version=version,
        previous_version=previous_version,
        detail="" if hidden else _detail(source, detail or ""),
        reason="" if hidden else reason or "",
        cursor=_cursor(at, source, row_id),
    )
