"""The one lock order: knowledge base -> document -> build -> task.

Every transaction that locks more than one of these rows takes them through these helpers, in
this order, so two transactions can never wait on each other in a cycle. `FOR NO KEY UPDATE` is
enough (no key changes) and does not block the `FOR KEY SHARE` locks that foreign-key inserts of
chunk rows take on their build.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connection

from kb.models import Build, Document, KnowledgeBase
from work.models import IngestionTask


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


def try_lock_build(build_id: int) -> Build | None:
    """`lock_build`, or None at once when another transaction holds the build (or it is gone)."""
    return (
        Build.objects.select_for_update(no_key=True, of=("self",), skip_locked=True)
        .select_related("revision", "index_version", "kb")
        .filter(pk=build_id)
        .first()
    )


def lock_task(task_id: int) -> IngestionTask | None:
    return IngestionTask.objects.select_for_update(no_key=True).filter(pk=task_id).first()


@contextlib.contextmanager
def singleton(key: int) -> Iterator[bool]:
    """A session-level advisory lock for singleton jobs (sweeper, reconciler): yields False to a
    second runner, which should do nothing. The job may run many short transactions inside; the
    lock goes with the connection if the process dies."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        row = cursor.fetchone()
    held = bool(row and row[0])
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
