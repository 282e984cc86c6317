"""Which of a question's document keys a person may see, by the one access rule
(`kb.access.readable_documents_q`, the API's and the admin's).

A key is *hidden* when a document of the knowledge base has it and the reader may not read that
document's groups (deleted or not): it is shown only as a count. Any other key is shown: a
readable document (with its title), a deleted one, or no document at all (the key is then only
the question's author's words). A key a person may *name* (in a question they write) is a
readable document that is not deleted; any other is "unknown" to them, so a check never tells a
hidden document from a missing one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kb.access import readable_documents_q
from kb.models import Document
from kb.selectors.metadata import DocumentReader


@dataclass(frozen=True)
class KeyView:
    key: str
    state: str  # "readable", "deleted", "missing" or "hidden"
    document_id: int | None = None
    title: str = ""


READABLE, DELETED, MISSING, HIDDEN = "readable", "deleted", "missing", "hidden"


def key_views(*, kb_id: int, keys: Iterable[str], reader: DocumentReader) -> dict[str, KeyView]:
    """Each key as `reader` may see it (one query for all)."""
    wanted = set(keys)
    if not wanted:
        return {}
    rows = Document.objects.filter(kb_id=kb_id, key__in=wanted)
    readable = set(
        rows.filter(
            readable_documents_q(access_groups=reader.access_groups, all_groups=reader.all_groups)
        ).values_list("pk", flat=True)
    )
    views = {key: KeyView(key, MISSING) for key in wanted}
    for pk, key, title, deleted_at in rows.values_list("pk", "key", "title", "deleted_at"):
        if pk not in readable:
            views[key] = KeyView(key, HIDDEN)
        elif deleted_at is not None:
            views[key] = KeyView(key, DELETED, pk, title)
        else:
            views[key] = KeyView(key, READABLE, pk, title)
    return views


def nameable_keys(*, kb_id: int, keys: Iterable[str], reader: DocumentReader) -> set[str]:
    """The keys `reader` may put in a question: readable documents of the knowledge base that
    are not deleted."""
    views = key_views(kb_id=kb_id, keys=keys, reader=reader)
    return {key for key, view in views.items() if view.state == READABLE}


def hidden_keys(*, kb_id: int, keys: Sequence[str], reader: DocumentReader) -> list[str]:
    """The keys of `keys` that `reader` may not see, in their order: what a change by them keeps
    (a person never removes what they cannot see)."""
    views = key_views(kb_id=kb_id, keys=keys, reader=reader)
    return [key for key in keys if views[key].state == HIDDEN]
