"""The one lock order: knowledge base -> document -> build -> task.

Every transaction that locks more than one of these rows takes them through these helpers, in
this order, so two transactions can never wait on each other in a cycle. `FOR NO KEY UPDATE` is
enough (no key changes) and does not block the `FOR KEY SHARE` locks that foreign-key inserts of
chunk rows take on their build.
"""

from __future__ import annotations

from kb.models import Build, Document, KnowledgeBase


def lock_knowledge_base(kb_id: int) -> KnowledgeBase:
    return KnowledgeBase.objects.select_for_update(no_key=True).get(pk=kb_id)


def lock_document(document_id: int) -> Document:
    return Document.objects.select_for_update(no_key=True).get(pk=document_id)


def lock_build(build_id: int) -> Build:
    return (
        Build.objects.select_for_update(no_key=True, of=("self",))
        .select_related("revision", "index_version", "kb")
        .get(pk=build_id)
    )
