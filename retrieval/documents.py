"""The API's reads of knowledge bases and documents, scoped by a principal: what lies outside
the scope raises the same OutOfScope as what does not exist."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import OuterRef, Q, QuerySet, Subquery

from kb.models import Build, Document, KnowledgeBase, Publication
from kb.selectors.documents import document_status
from retrieval.principals import OutOfScope, Principal


def knowledge_bases(*, principal: Principal) -> QuerySet[KnowledgeBase]:
    """The knowledge bases the principal may search, by slug."""
    kbs = KnowledgeBase.objects.filter(
        tenant_id=principal.tenant_id, active_index_version__isnull=False
    ).select_related("active_index_version")
    if principal.kb_ids is not None:
        kbs = kbs.filter(pk__in=principal.kb_ids)
    return kbs.order_by("slug", "id")


def _readable_documents(principal: Principal) -> QuerySet[Document]:
    """Documents of the principal's tenant and knowledge bases whose groups it may read."""
    documents = Document.objects.filter(kb__tenant_id=principal.tenant_id)
    if principal.kb_ids is not None:
        documents = documents.filter(kb_id__in=principal.kb_ids)
    if not principal.all_groups:
        documents = documents.filter(
            Q(access_groups=[]) | Q(access_groups__overlap=sorted(principal.access_groups))
        )
    return documents


def readable_documents(*, principal: Principal) -> QuerySet[Document]:
    """Every document the principal may read, deleted ones included (the compatibility
    endpoints count a vector store's files with it: `retrieval.compat.vector_stores`)."""
    return _readable_documents(principal)


def _with_live_revision(documents: QuerySet[Document]) -> QuerySet[Document]:
    live = Publication.objects.filter(
        document=OuterRef("pk"), index_version_id=OuterRef("kb__active_index_version_id")
    )
    return documents.annotate(
        live_revision=Subquery(live.values("build__revision__number")[:1]),
        live_build_id=Subquery(live.values("build_id")[:1]),
    )


@dataclass(frozen=True)
class DocumentPage:
    documents: list[Document]
    next_after_id: int | None


def documents_page(
    *, principal: Principal, kb: KnowledgeBase, after_id: int | None, limit: int
) -> DocumentPage:
    """Non-deleted documents of `kb` the principal may read, in id order after `after_id`
    (keyset pagination: stable while documents are added, one indexed range scan per page).
    Each carries `live_revision` and `live_build_id` (None when nothing is live)."""
    documents = _readable_documents(principal).filter(kb=kb, deleted_at__isnull=True)
    if after_id is not None:
        documents = documents.filter(pk__gt=after_id)
    rows = list(_with_live_revision(documents).select_related("kb").order_by("pk")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return DocumentPage(documents=rows, next_after_id=rows[-1].pk if more else None)


def document_for(*, principal: Principal, document_id: int) -> Document:
    """A document the principal may read (deleted ones included); OutOfScope otherwise, the same
    for 'does not exist', 'another tenant' and 'not your access groups'."""
    document = (
        _with_live_revision(_readable_documents(principal))
        .select_related("kb")
        .filter(pk=document_id)
        .first()
    )
    if document is None:
        raise OutOfScope(document_id)
    return document


IN_PROGRESS_STATES = (Build.State.PENDING, Build.State.BUILDING, Build.State.READY)


@dataclass(frozen=True)
class DocumentDetail:
    document: Document
    status: str
    live_revision: int | None
    live_build_id: int | None
    running_builds: list[Build] = field(default_factory=list)


def document_detail(*, principal: Principal, document_id: int) -> DocumentDetail:
    """A readable document with its status line, live revision and the builds still on their
    way (pending, building, or ready and waiting for approval). Raises OutOfScope."""
    document = document_for(principal=principal, document_id=document_id)
    running = list(
        Build.objects.filter(document=document, state__in=IN_PROGRESS_STATES)
        .select_related("revision", "index_version")
        .order_by("-revision__number", "index_version__number")
    )
    live = getattr(document, "live_revision", None) if document.deleted_at is None else None
    return DocumentDetail(
        document=document,
        status=document_status(document=document),
        live_revision=live,
        live_build_id=getattr(document, "live_build_id", None) if live is not None else None,
        running_builds=running,
    )
