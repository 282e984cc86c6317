"""Writes of index versions: a knowledge base and its first version, a new version rebuilt
with another model or chunking while the active one serves, the swap and its rollback."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone
from django.utils.translation import gettext

import embeddings
from kb import locks
from kb.ann import STORAGES, ann_index_ensure, ann_index_ready
from kb.ann_build import ann_index_build_soon
from kb.models import (
    PIPELINE_VERSION,
    Build,
    IndexVersion,
    KnowledgeBase,
    Revision,
    Tenant,
)
from kb.selectors.index_versions import (
    index_version_coverage,
    index_version_rollback_target,
    index_version_settings_line,
    index_version_settings_record,
)
from kb.services.base import ActionRefused, Actor, actor_id
from kb.transactions import retry_conflicts
from work.models import AuditEvent, IngestionTask
from work.outbox import task_create


def english_list_default(provider: str) -> bool:
    """Whether a new version embedded by `provider` gets the English list unless asked not to:
    for `use` (measured: B8 with a third list), when CANON_ENGLISH_LIST is on."""
    return settings.ENGLISH_LIST_DEFAULT and provider == embeddings.USE_PROVIDER


def english_list_fields(*, provider: str, english_list: bool) -> dict[str, Any]:
    """The IndexVersion fields of its English list (`IndexVersion.english_provider`): the
    packaged `minilm` model, or none. Refused for a version that is embedded by it already."""
    if not english_list:
        return {"english_provider": "", "english_model": "", "english_dimensions": None}
    if provider == embeddings.MINILM_PROVIDER:
        raise ActionRefused(
            gettext("This model reads English already: it needs no English list beside it.")
        )
    return {
        "english_provider": embeddings.MINILM_PROVIDER,
        "english_model": embeddings.MINILM_MODEL,
        "english_dimensions": embeddings.MINILM_DIMENSIONS,
    }


@transaction.atomic
def knowledge_base_create(
    *,
    tenant: Tenant,
    name: str,
    slug: str,
    require_approval: bool = False,
    ocr_mode: str = KnowledgeBase.OcrMode.PAGES_WITHOUT_TEXT,
    extract_headers_footers: bool = False,
    provider: str | None = None,
    model: str | None = None,
    dimensions: int | None = None,
    english_list: bool | None = None,
) -> KnowledgeBase:
    """Create a knowledge base with its first index version, active from the start; with the
    English list when `english_list`, by default as `english_list_default` says."""
    provider = provider or settings.EMBEDDING_PROVIDER
    if english_list is None:
        english_list = english_list_default(provider)
    kb = KnowledgeBase.objects.create(
        tenant=tenant,
        name=name,
        slug=slug,
        require_approval=require_approval,
        ocr_mode=ocr_mode,
        extract_headers_footers=extract_headers_footers,
    )
    version = IndexVersion.objects.create(
        kb=kb,
        number=1,
        state=IndexVersion.State.ACTIVE,
        provider=provider,
        model=model or settings.EMBEDDING_MODEL,
        dimensions=dimensions or settings.EMBEDDING_DIMENSIONS,
        chunk_size=settings.CHUNK_SIZE,
        chunk_overlap=settings.CHUNK_OVERLAP,
        pipeline_version=PIPELINE_VERSION,
        activated_at=timezone.now(),
        **english_list_fields(provider=provider, english_list=english_list),
    )
    kb.active_index_version = version
    kb.save(update_fields=["active_index_version"])
    transaction.on_commit(lambda: ann_index_ensure(version_id=version.pk))
    return kb


def index_version_create(
    *,
    kb_id: int,
    provider: str,
    model: str,
    dimensions: int,
    chunk_size: int,
    chunk_overlap: int,
    actor: Actor = None,
    vector_storage: str = "vector",
    reason: str = "",
    english_list: bool = False,
) -> IndexVersion:
    """A new embedding space / pipeline for a knowledge base. It starts *building*: every
    non-deleted document's desired revision is built into it as a candidate while the active
    version keeps serving. Its chunks are written with no HNSW index; the index is built once
    they all are (`kb.ann_build`), and only then can it be swapped in. `vector_storage`
    ("vector" or "halfvec") is what that index holds (`kb.ann`). `reason` is kept in the audit
    event, the knowledge base's timeline's "why". `english_list`: its chunks not in Chinese are
    embedded a second time by the packaged English model (`english_list_fields`), read by
    hybrid search as a third list; a swap to or from such a version turns it on or off."""
    if vector_storage not in STORAGES:
        raise ActionRefused(
            gettext("Unknown vector storage %(storage)s: one of %(storages)s.")
            % {"storage": repr(vector_storage), "storages": STORAGES}
        )
    english = english_list_fields(provider=provider, english_list=english_list)
    with transaction.atomic():
        kb = locks.lock_knowledge_base(kb_id)
        number = (kb.index_versions.aggregate(n=Max("number"))["n"] or 0) + 1
        version = IndexVersion.objects.create(
            kb=kb,
            number=number,
            state=IndexVersion.State.BUILDING,
            provider=provider,
            model=model,
            dimensions=dimensions,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            pipeline_version=PIPELINE_VERSION,
            vector_storage=vector_storage,
            **english,
        )
        revisions = Revision.objects.filter(
            document__kb=kb,
            document__deleted_at__isnull=True,
            document__desired_revision=F("number"),
        )
        for revision in revisions:
            build = Build.objects.create(
                kb=kb,
                document_id=revision.document_id,
                revision=revision,
                index_version=version,
                dimensions=dimensions,
            )
            task_create(
                kind=IngestionTask.Kind.BUILD,
                kb_id=kb.pk,
                document_id=revision.document_id,
                build_id=build.pk,
            )
        AuditEvent.objects.create(
            kind="index_version_created",
            kb=kb,
            subject_type="index_version",
            subject_id=version.pk,
            action=(
                f"v{number}: building {revisions.count()} documents with "
                f"{index_version_settings_line(version)}"
            ),
            actor_id=actor_id(actor),
            details={
                "settings": index_version_settings_record(version),
                **({"reason": reason} if reason else {}),
            },
        )
    # Due at once only if there is nothing to build; else after the last build (kb.ann_build).
    transaction.on_commit(lambda: ann_index_build_soon(version_id=version.pk))
    return version


def index_version_coverage_gaps(*, version: IndexVersion) -> list[str]:
    """What keeps `version` from being swapped in, one line per document ("<key>: ..."): a
    document whose desired revision is still being built in it, or that it would serve worse
    than the active version (`kb.selectors.index_versions.index_version_coverage`). Empty when
    the swap may go ahead; failures the active version shares are not gaps."""
    kb = KnowledgeBase.objects.get(pk=version.kb_id)
    return index_version_coverage(version=version, kb=kb).gaps


def _swap_refusal(version: IndexVersion, gaps: list[str]) -> ActionRefused:
    more = gettext("; and %(n)s more") % {"n": len(gaps) - 20} if len(gaps) > 20 else ""
    return ActionRefused(
        gettext(
            "Index version %(n)s does not serve every document the active version serves yet: "
            "%(gaps)s%(more)s"
        )
        % {"n": version.number, "gaps": "; ".join(gaps[:20]), "more": more}
    )


# What a swap must pass beyond coverage, registered at start-up by the floors above, which kb
# may not import (evaluation's quality gate: `evaluation.apps`), so every caller of the swap
# service (the admin, an API, a script) is checked alike. Each is called with keywords — kb
# (locked), version, previous (the active version, or None), action ("swap" or "rollback"),
# actor, reason, override (the person asked to swap although a check refuses) — inside the
# swap's transaction, and raises ActionRefused to refuse, or returns what to keep in the swap's
# audit event (a dict merged into its details; None: nothing).
SwapCheck = Callable[..., dict[str, Any] | None]
SWAP_CHECKS: list[SwapCheck] = []


@retry_conflicts
def index_version_activate(
    *,
    version_id: int,
    actor: Actor,
    reason: str = "",
    expected_active_id: int | None = None,
    action: str = "swap",
    override: bool = False,
) -> IndexVersion:
    """Swap the knowledge base's active index version in one transaction, after the coverage
    check. The previous active version is retired (kept for rollback during retention).

    The check (`kb.selectors.index_versions.index_version_coverage`): nothing is being built
    for the version, and it serves every document the active version serves — each non-deleted
    document at its desired revision, except where that revision failed (or was never built)
    in both versions, so that the active one serves nothing of the document, or the same
    earlier revision as the candidate. Those documents (`tolerated`: typically a file no parser
    can read) are served after the swap exactly as before it, which is why the swap may go
    ahead: the promise — search sees exactly one complete, published version of a document, or
    none — is kept by the pointers alone. Search reads the Publication of the active version;
    every Publication names a complete build (`build_publish`), the candidate's as much as the
    active one's; the swap moves `active_index_version` in one commit. A document without a
    live build in the candidate is not served after the swap, as it was not served before (or
    is served at the same revision from the candidate's own complete build).

    Locks, in the one order (`kb.locks`): the knowledge base row first, so concurrent swaps
    serialize (with `expected_active_id` the loser is refused instead of swapping twice); then
    the tolerated documents, by id, and the check runs again under those locks, so no switch
    can publish one of them in the active version between the check and the commit (it waits
    and publishes into the retired version). Raises ActionRefused.

    Then the checks the floors above registered (`SWAP_CHECKS`: evaluation's quality gate), in
    the same transaction under the same lock; `override` is a person's request to swap although
    one refuses, which a check honours only with `reason` and the permission it names.
    """
    with transaction.atomic():
        version = IndexVersion.objects.get(pk=version_id)
        kb = locks.lock_knowledge_base(version.kb_id)
        if expected_active_id is not None and kb.active_index_version_id != expected_active_id:
            raise ActionRefused(
                gettext(
                    "The active index version changed since you opened this page; review it again."
                )
            )
        if kb.active_index_version_id == version.pk:
            raise ActionRefused(
                gettext("Index version %(n)s is already active.") % {"n": version.number}
            )
        if version.state == IndexVersion.State.FAILED:
            raise ActionRefused(
                gettext("Index version %(n)s failed; it cannot serve.") % {"n": version.number}
            )
        if version.state == IndexVersion.State.RETIRED and not index_version_retained(version):
            raise ActionRefused(
                gettext("Index version %(n)s is past its retention window.") % {"n": version.number}
            )
        coverage = index_version_coverage(version=version, kb=kb)
        if coverage.gaps:
            raise _swap_refusal(version, coverage.gaps)
        if coverage.tolerated:
            tolerated = sorted(entry.document_id for entry in coverage.tolerated)
            for document_id in tolerated:
                locks.lock_document(document_id)
            coverage = index_version_coverage(version=version, kb=kb)
            if coverage.gaps:
                raise _swap_refusal(version, coverage.gaps)
            unlocked = {e.document_id for e in coverage.tolerated} - set(tolerated)
            if unlocked:
                raise ActionRefused(
                    gettext("Documents changed while the swap was checked; review the swap again.")
                )
        if not ann_index_ready(version.pk):
            raise ActionRefused(
                gettext(
                    "Index version %(n)s covers the knowledge base, but its vector index is "
                    "still being built; the swap is possible once it is."
                )
                % {"n": version.number}
            )
        now = timezone.now()
        previous_id = kb.active_index_version_id
        previous = IndexVersion.objects.filter(pk=previous_id).first() if previous_id else None
        checked: dict[str, Any] = {}
        for check in SWAP_CHECKS:
            checked.update(
                check(
                    kb=kb,
                    version=version,
                    previous=previous,
                    action=action,
                    actor=actor,
                    reason=reason,
                    override=override,
                )
                or {}
            )
        if previous_id is not None:
            IndexVersion.objects.filter(pk=previous_id).update(
                state=IndexVersion.State.RETIRED, retired_at=now
            )
        IndexVersion.objects.filter(pk=version.pk).update(
            state=IndexVersion.State.ACTIVE, activated_at=now, retired_at=None
        )
        kb.active_index_version_id = version.pk
        kb.save(update_fields=["active_index_version"])
        AuditEvent.objects.create(
            kind=f"index_version_{action}",
            kb=kb,
            subject_type="index_version",
            subject_id=version.pk,
            action=(
                f"active v{version.number} ({index_version_settings_line(version)}); "
                + (
                    f"was v{previous.number} ({index_version_settings_line(previous)})"
                    if previous
                    else "none was active"
                )
                + _known_failures_words(len(coverage.tolerated))
            ),
            actor_id=actor_id(actor),
            details={
                "previous_id": previous_id,
                "reason": reason,
                "from": index_version_settings_record(previous),
                "to": index_version_settings_record(version),
                "not_served": [e.document_id for e in coverage.tolerated],
                **checked,
            },
        )
        version.refresh_from_db()
        return version


def _known_failures_words(n: int) -> str:
    if not n:
        return ""
    documents = (
        "1 document whose current revision" if n == 1 else f"{n} documents whose current revision"
    )
    return f"; served as before: {documents} failed in both versions"


def index_version_retained(version: IndexVersion) -> bool:
    if version.state != IndexVersion.State.RETIRED or version.retired_at is None:
        return version.state != IndexVersion.State.RETIRED
    kb = KnowledgeBase.objects.get(pk=version.kb_id)
    return version.retired_at >= timezone.now() - timedelta(days=kb.retention_days)


def index_version_rollback(*, kb_id: int, actor: Actor, reason: str = "") -> IndexVersion:
    """Re-activate the previous version:
    `kb.selectors.index_versions.index_version_rollback_target`, the most
    recently retired one still retained and older than the active one (never forward). Uploads
    made since the swap were built into it too, so a rollback never serves stale text. The
    knowledge base is locked and re-checked by `index_version_activate`."""
    kb = KnowledgeBase.objects.select_related("active_index_version").get(pk=kb_id)
    previous = index_version_rollback_target(kb=kb)
    if previous is None:
        raise ActionRefused(gettext("There is no earlier retained index version to roll back to."))
    return index_version_activate(
        version_id=previous.pk,
        actor=actor,
        reason=reason,
        expected_active_id=kb.active_index_version_id,
        action="rollback",
    )
