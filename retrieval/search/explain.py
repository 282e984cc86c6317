"""Why a chunk is or is not visible, and why each hit of a search is: for the API's explain and
the admin's test search."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import formats, timezone
from django.utils.translation import gettext

from kb.completeness import build_completeness
from kb.models import Build, Chunk, Document, IndexVersion, KnowledgeBase, Publication
from retrieval import routing
from retrieval.principals import OutOfScope, Principal
from retrieval.search.hits import Hit
from retrieval.search.snapshot import (
    snapshot_in_transaction,
)
from retrieval.search.visibility import (
    search_params,
    visible_sql,
)


@dataclass(frozen=True)
class ChunkExplanation:
    chunk_id: int
    visible: bool
    reasons: list[str]
    chunk: dict[str, Any]
    document: dict[str, Any]
    build: dict[str, Any]
    index_version: dict[str, Any]
    pointer: dict[str, Any]
    approval: dict[str, Any]
    access: dict[str, Any]


def _chunk_visible_now(*, principal: Principal, chunk: Chunk, iv: int) -> bool:
    """The search statement's own visibility rule, applied to one chunk."""
    params = {**search_params(principal=principal, kb=chunk.kb), "chunk": chunk.pk}
    with routing.db().cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) {visible_sql(iv=iv, params=params)} AND c.id = %(chunk)s", params
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def chunk_explain(*, principal: Principal, chunk_id: int) -> ChunkExplanation:
    """Why a chunk is, or is not, returned to `principal` by search right now: the facts of the
    visibility rule read in one snapshot, the verdict from the search statement itself. Raises
    OutOfScope, exactly as for an id that does not exist, for a chunk the principal may not read:
    of another tenant, outside its knowledge bases, or of a document whose access groups it
    does not hold. A readable chunk that is not served (superseded, awaiting approval, of a
    deleted document, ...) is explained."""
    with transaction.atomic():
        snapshot_in_transaction()
        chunk = (
            Chunk.objects.select_related(
                "kb", "document", "build__revision", "build__index_version", "index_version"
            )
            .filter(pk=chunk_id, kb__tenant_id=principal.tenant_id)
            .first()
        )
        if (
            chunk is None
            or not principal.may_read_kb(chunk.kb_id)
            or not principal.may_read_groups(chunk.document.access_groups)
        ):
            raise OutOfScope(chunk_id)
        kb, document, build, version = chunk.kb, chunk.document, chunk.build, chunk.index_version
        active_id = kb.active_index_version_id
        publication = (
            Publication.objects.select_related("build__revision")
            .filter(document=document, index_version_id=active_id)
            .first()
        )
        completeness = build_completeness(build_id=build.pk)
        problems = completeness.problems(
            expected_count=build.expected_chunk_count,
            dimensions=version.dimensions,
            manifest=build.manifest_sha256,
            english_expected=build.english_expected,
            english_dimensions=version.english_dimensions,
        )
        approved = (
            document.events.filter(build_id=build.pk, action="approve")
            .order_by("-created_at")
            .values_list("created_at", flat=True)
            .first()
        )
        visible = active_id is not None and _chunk_visible_now(
            principal=principal, chunk=chunk, iv=active_id
        )
    groups_held = sorted(set(document.access_groups) & principal.access_groups)
    points_here = publication is not None and publication.build_id == build.pk
    reasons: list[str] = []
    if version.pk != active_id:
        reasons.append(
            f"The chunk belongs to index version {version.number} ({version.state}), "
            "not the knowledge base's active one."
        )
    if publication is None:
        reasons.append("No build of this document is live in the active index version.")
    elif not points_here:
        reasons.append(
            f"The document's live pointer names build {publication.build_id} (revision "
            f"{publication.build.revision.number}), not this chunk's build {build.pk}."
        )
    if build.state != Build.State.LIVE:
        detail = {
            Build.State.READY: "complete and waiting for approval",
            Build.State.PENDING: "waiting to be built",
            Build.State.BUILDING: "still being built",
        }.get(Build.State(build.state), build.error or "no longer served")
        reasons.append(f"Build {build.pk} is {build.state}: {detail}.")
    if problems:
        reasons.append(f"Build {build.pk} is incomplete: {'; '.join(problems)}.")
    if document.desired_revision != build.revision.number:
        reasons.append(
            f"The build is of revision {build.revision.number}; revision "
            f"{document.desired_revision} is the desired one."
        )
    if document.deleted_at is not None:
        reasons.append(f"The document was deleted at {document.deleted_at.isoformat()}.")
    if visible:
        reasons = [
            f"The document's live pointer in the active index version names this chunk's "
            f"build {build.pk} (revision {build.revision.number}); the document is not deleted "
            "and the caller may read its access groups."
        ]
        if problems:
            reasons.append(
                f"Yet the live build fails its completeness check ({'; '.join(problems)}): the "
                "visibility rule is violated; run `manage.py kb_verify` and escalate."
            )
    elif not reasons:
        reasons.append("Not visible, for a reason the facts above do not show.")
    return ChunkExplanation(
        chunk_id=chunk.pk,
        visible=visible,
        reasons=reasons,
        chunk={"id": chunk.pk, "ordinal": chunk.ordinal, "token_count": chunk.token_count},
        document={
            "id": document.pk,
            "key": document.key,
            "title": document.title,
            "desired_revision": document.desired_revision,
            "deleted": document.deleted_at is not None,
            "deleted_at": document.deleted_at,
        },
        build={
            "id": build.pk,
            "state": build.state,
            "revision": build.revision.number,
            "is_desired_revision": build.revision.number == document.desired_revision,
            "expected_chunk_count": build.expected_chunk_count,
            "chunk_count": completeness.chunk_count,
            "complete": not problems,
            "problems": problems,
            "error": build.error,
        },
        index_version={
            "number": version.number,
            "state": version.state,
            "active": version.pk == active_id,
        },
        pointer={
            "build_id": publication.build_id if publication else None,
            "revision": publication.build.revision.number if publication else None,
            "published_at": publication.published_at if publication else None,
            "points_at_this_build": points_here,
        },
        approval={
            "kb_requires_approval": kb.require_approval,
            "awaiting_approval": build.state == Build.State.READY,
            "approved_at": approved,
        },
        access={
            "document_groups": sorted(document.access_groups),
            "caller_groups": sorted(principal.access_groups),
            "caller_reads_all_groups": principal.all_groups,
            "groups_matched": groups_held,
            "allowed": True,  # what the caller may not read is not explained (OutOfScope)
        },
    )


@dataclass(frozen=True)
class HitVisibility:
    """Why one hit of a search was returned to its principal: the facts of the visibility rule
    the search statement applied to it (for the admin's test search)."""

    pointer: str  # which pointer named the hit's build, in which version, since when
    document_groups: list[str]
    groups_matched: list[str]
    groups: str  # the access-group clause, in words


def hits_visibility(
    *,
    principal: Principal,
    kb: KnowledgeBase,
    version: IndexVersion,
    hits: list[Hit],
    as_of: datetime | None = None,
    state: str | None = None,
) -> dict[int, HitVisibility]:
    """Per hit (by chunk id): the pointer that serves it and the access groups that let
    `principal` read it. The hits passed the search statement's rule already; this names its
    clauses. Two queries (the documents' groups, the pointers' times). `state`: what a version
    that is not the active one is doing, in the words its caller shows elsewhere (the admin's
    `index_version_status`: a candidate that covers the knowledge base is "ready" although its
    stored state says building); default, its stored state."""
    if not hits:
        return {}
    groups_of = dict(
        Document.objects.filter(kb=kb, key__in={h.document_key for h in hits}).values_list(
            "key", "access_groups"
        )
    )
    since = dict(
        Publication.objects.filter(
            index_version=version, build_id__in={h.build_id for h in hits}
        ).values_list("build_id", "published_at")
    )
    active = version.pk == kb.active_index_version_id
    which = f"v{version.number} ({gettext('active') if active else state or version.state})"
    result = {}
    for hit in hits:
        groups = sorted(groups_of.get(hit.document_key) or [])
        matched = sorted(set(groups) & principal.access_groups)
        # the admin's test search shows these (in the person's language); no API does
        facts = {"which": which, "build": hit.build_id, "revision": hit.revision}
        if as_of is not None:
            pointer = gettext(
                "At %(at)s the document's pointer in %(which)s named build %(build)s "
                "(r%(revision)s) and it was not deleted; its chunks are still retained."
            ) % {**facts, "at": _moment(as_of)}
        else:
            published = since.get(hit.build_id)
            pointer = (
                gettext(
                    "The document's pointer in %(which)s names build %(build)s (r%(revision)s), "
                    "since %(since)s; the document is not deleted."
                )
                % {**facts, "since": _moment(published)}
                if published
                else gettext(
                    "The document's pointer in %(which)s names build %(build)s (r%(revision)s); "
                    "the document is not deleted."
                )
                % facts
            )
        if not groups:
            words = gettext("No access groups: everyone in the tenant reads it.")
        elif principal.all_groups:
            words = gettext("Behind %(groups)s; this search reads every group.") % {
                "groups": ", ".join(groups)
            }
        else:
            words = gettext("Behind %(groups)s; matched: %(matched)s.") % {
                "groups": ", ".join(groups),
                "matched": ", ".join(matched),
            }
        result[hit.chunk_id] = HitVisibility(pointer, groups, matched, words)
    return result


def _moment(at: datetime) -> str:
    """To the second, in the server's zone, as the active language writes it."""
    return formats.date_format(timezone.localtime(at), "SHORT_DATETIME_FORMAT")
