"""Issue 37, items 5 and 7: the document list's bulk "Set metadata…" when selected documents hold
keys the knowledge base does not declare (set before its fields were). The confirmation names
each such document and its keys; the person leaves them as they are (the others change) or drops
those keys; nothing typed is lost on the way (selection, values, reason), not even on a refusal.
The reason then shows in each document's History and in the timeline, not only behind HISTORY."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from kb.audit_kinds import METADATA_SET
from kb.models import Document, KnowledgeBase, MetadataField
from kb.roles import CONTENT_MANAGERS, ensure_roles
from kb.services.metadata import UndeclaredKeys, documents_metadata_set, metadata_field_save
from tests.console.admin_world import staff
from tests.retrieval.factories import upload
from work.models import AuditEvent

pytestmark = pytest.mark.django_db

LIST = "/admin/kb/document/"


def words(response: Any) -> str:
    """The page's text without its tags, spaces collapsed."""
    text = html.unescape(response.content.decode())
    return " ".join(re.sub(r"<[^>]+>", " ", text).split())


def section(response: Any, element_id: str, end: str = "</table>") -> str:
    """The words of the element with `element_id`, up to the first `end` after it."""
    text = html.unescape(response.content.decode())
    start = text.index(f'id="{element_id}"')
    return " ".join(
        re.sub(r"<[^>]+>", " ", text[text.index(">", start) + 1 : text.index(end, start)]).split()
    )


@pytest.fixture
def legacy(kb: KnowledgeBase) -> dict[str, Document]:
    """Three documents: two hold keys set before the knowledge base declared any field
    (`legacy`, `owner`), then `year` and `team` were declared."""
    docs = {key: upload(kb, key, f"{key} text.").document for key in ("alpha", "beta", "gamma")}
    Document.objects.filter(pk=docs["alpha"].pk).update(metadata={"legacy": "v1", "year": 2020})
    Document.objects.filter(pk=docs["beta"].pk).update(metadata={"legacy": "v2", "owner": "ops"})
    metadata_field_save(kb=kb, name="year", type="number")
    metadata_field_save(kb=kb, name="team", type="string")
    for document in docs.values():
        document.refresh_from_db()
    return docs


@pytest.fixture
def carol(kb: KnowledgeBase) -> Client:
    ensure_roles(Group, Permission)
    client = Client()
    client.force_login(staff("carol", CONTENT_MANAGERS, kb.tenant))
    return client


def selection(docs: dict[str, Document]) -> dict[str, Any]:
    return {"action": "set_metadata", "_selected_action": [d.pk for d in docs.values()]}


def metadata(document: Document) -> dict[str, Any]:
    document.refresh_from_db()
    return dict(document.metadata)


# --- the service ------------------------------------------------------------------------------


def test_the_service_names_every_holder_and_changes_nothing(
    kb: KnowledgeBase, legacy: dict[str, Document]
) -> None:
    ids = [d.pk for d in legacy.values()]

    with pytest.raises(UndeclaredKeys) as refused:
        documents_metadata_set(kb=kb, document_ids=ids, values={"year": 2024})

    assert refused.value.holders == {"alpha": ["legacy"], "beta": ["legacy", "owner"]}
    assert "alpha (legacy)" in str(refused.value) and "beta (legacy, owner)" in str(refused.value)
    assert metadata(legacy["gamma"]) == {}, "all or nothing: not even the fitting one changed"
    assert not AuditEvent.objects.filter(kind=METADATA_SET).exists()


def test_the_service_drops_undeclared_keys_when_asked_and_records_why(
    kb: KnowledgeBase, legacy: dict[str, Document], admin_user: User
) -> None:
    ids = [d.pk for d in legacy.values()]

    changed = documents_metadata_set(
        kb=kb,
        document_ids=ids,
        values={"year": 2024},
        drop_undeclared=True,
        actor=admin_user,
        reason="yearly review",
    )

    assert changed == 3
    assert [metadata(legacy[k]) for k in ("alpha", "beta", "gamma")] == [{"year": 2024}] * 3
    events = {e.subject_id: e for e in AuditEvent.objects.filter(kind=METADATA_SET)}
    assert set(events) == set(ids)
    alpha = events[legacy["alpha"].pk]
    assert (alpha.actor, alpha.details, alpha.kb_id) == (
        admin_user,
        {"reason": "yearly review"},
        kb.pk,
    )
    assert alpha.action == "legacy: v1 → removed (not declared); year: 2020 → 2024"
    # idempotent: nothing left to change, no second event
    assert documents_metadata_set(kb=kb, document_ids=ids, values={"year": 2024}) == 0
    assert AuditEvent.objects.filter(kind=METADATA_SET).count() == 3


# --- the admin --------------------------------------------------------------------------------


def test_the_confirmation_names_holders_and_the_others_change(
    carol: Client, legacy: dict[str, Document]
) -> None:
    preview = carol.post(LIST, {**selection(legacy), "stage": "preview", "metadata__year": "2024"})

    assert preview.status_code == 200
    page = words(preview)
    assert "2 documents hold keys Handbook does not declare" in page, page
    holders = section(preview, "undeclared")
    assert "alpha" in holders and "legacy : v1" in holders
    assert "beta" in holders and "legacy : v2" in holders and "owner : ops" in holders
    assert "gamma" not in holders
    assert "They are left as they are ; the others change." in page
    changing = section(preview, "will-change")
    assert "gamma" in changing and "alpha" not in changing and "beta" not in changing
    assert "Will change (1 of 3 selected)" in page

    done = carol.post(
        LIST,
        {
            **selection(legacy),
            "stage": "confirm",
            "values_json": preview.context["values_json"],
            "undeclared": "leave",
            "reason": "yearly review",
        },
        follow=True,
    )

    assert metadata(legacy["gamma"]) == {"year": 2024}
    assert metadata(legacy["alpha"]) == {"legacy": "v1", "year": 2020}
    assert metadata(legacy["beta"]) == {"legacy": "v2", "owner": "ops"}
    messages = [str(m) for m in done.context["messages"]]
    assert "Set metadata on 1: gamma." in messages
    assert any("Left as they are" in m and "alpha, beta" in m for m in messages), messages


def test_dropping_the_undeclared_keys_is_shown_before_it_is_done(
    carol: Client, legacy: dict[str, Document]
) -> None:
    preview = carol.post(LIST, {**selection(legacy), "stage": "preview", "metadata__year": "2024"})
    values_json = preview.context["values_json"]

    # the person asks to drop the keys, having typed a reason: the plan again, reason kept
    review = carol.post(
        LIST,
        {
            **selection(legacy),
            "stage": "confirm",
            "values_json": values_json,
            "undeclared": "leave",
            "reason": "old keys from the import",
            "undeclared_review": "drop",
        },
    )

    assert review.status_code == 200
    changing = section(review, "will-change")
    assert "legacy: v1 → removed (not declared)" in changing
    assert "owner: ops → removed (not declared)" in changing
    assert "Will change (3)" in words(review)
    assert review.context["undeclared"] == "drop"
    assert review.context["form"]["reason"].value() == "old keys from the import"
    assert 'name="undeclared" value="drop"' in review.content.decode()
    assert not review.context["form"].errors  # no "required" before anyone confirmed
    assert metadata(legacy["alpha"]) == {"legacy": "v1", "year": 2020}, "a review writes nothing"

    carol.post(
        LIST,
        {
            **selection(legacy),
            "stage": "confirm",
            "values_json": values_json,
            "undeclared": "drop",
            "reason": "old keys from the import",
        },
    )

    assert metadata(legacy["alpha"]) == {"year": 2024}
    assert metadata(legacy["beta"]) == {"year": 2024}
    assert metadata(legacy["gamma"]) == {"year": 2024}


def test_nothing_typed_is_lost_going_back_forgetting_the_reason_or_on_a_refusal(
    kb: KnowledgeBase, carol: Client, legacy: dict[str, Document]
) -> None:
    preview = carol.post(
        LIST,
        {**selection(legacy), "stage": "preview", "metadata__year": "2024", "metadata__team": "x"},
    )
    confirm = {
        **selection(legacy),
        "stage": "confirm",
        "values_json": preview.context["values_json"],
        "undeclared": "drop",
    }

    # no reason: the confirmation again, the values and the choice with it
    again = carol.post(LIST, confirm)
    assert again.status_code == 200
    assert again.context["form"].errors["reason"]
    assert again.context["values_json"] == preview.context["values_json"]
    assert again.context["undeclared"] == "drop"

    # back to the values: the inputs hold what was typed, and the reason rides along
    edit = carol.post(LIST, {**confirm, "reason": "typed before", "edit_values": "1"})
    assert edit.status_code == 200
    form = edit.context["form"]
    assert (form["metadata__year"].value(), form["metadata__team"].value()) == (2024, "x")
    assert edit.context["kept_reason"] == "typed before"
    assert 'name="reason" value="typed before"' in edit.content.decode()
    assert [d.pk for d in edit.context["selected"]] == [d.pk for d in legacy.values()]
    preview_again = carol.post(
        LIST,
        {
            **selection(legacy),
            "stage": "preview",
            "metadata__year": "2025",
            "metadata__team": "x",
            "reason": "typed before",
        },
    )
    assert preview_again.context["form"]["reason"].value() == "typed before"

    # a field retyped meanwhile refuses the write: the page again, saying why, nothing lost
    MetadataField.objects.filter(kb=kb, name="team").update(type="number")
    refused = carol.post(LIST, {**confirm, "reason": "yearly review"})
    assert refused.status_code == 200, "not back to the list with the selection lost"
    refusal = section(refused, "refusal", end="</p>")
    assert refusal.startswith("Nothing was changed") and '"team" is a number field' in refusal
    assert refused.context["form"]["reason"].value() == "yearly review"
    assert refused.context["values_json"] == preview.context["values_json"]
    assert metadata(legacy["gamma"]) == {}


def test_the_reason_shows_in_the_history_box_and_the_timeline(
    kb: KnowledgeBase, carol: Client, legacy: dict[str, Document]
) -> None:
    preview = carol.post(LIST, {**selection(legacy), "stage": "preview", "metadata__year": "2024"})
    carol.post(
        LIST,
        {
            **selection(legacy),
            "stage": "confirm",
            "values_json": preview.context["values_json"],
            "undeclared": "leave",
            "reason": "the yearly review of 2024",
        },
    )

    gamma = legacy["gamma"]
    page = carol.get(f"/admin/kb/document/{gamma.pk}/change/")
    history = section(page, "history")
    assert "metadata set" in history and "carol" in history
    assert "the yearly review of 2024" in history and "year: — → 2024" in history
    progress = carol.get(f"/admin/kb/document/{gamma.pk}/progress/").json()
    assert "the yearly review of 2024" in progress["history_html"]
    # the documents left as they were have no such line
    assert "the yearly review" not in section(
        carol.get(f"/admin/kb/document/{legacy['alpha'].pk}/change/"), "history"
    )

    timeline = words(carol.get(f"/admin/kb/knowledgebase/{kb.pk}/timeline/"))
    assert "set metadata" in timeline and "the yearly review of 2024" in timeline
    # Django's own record behind HISTORY is still kept
    assert LogEntry.objects.filter(object_id=str(gamma.pk)).exists()
