"""Search as of a past time answers what was live then, from the publication history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from kb.models import Build, KnowledgeBase, TenantMembership
from kb.services.documents import document_delete, document_restore
from kb.services.publication import document_rollback
from retrieval.principals import api_key_create
from tests.retrieval.factories import api, publish, search

pytestmark = pytest.mark.django_db


@dataclass
class Timeline:
    before: datetime
    r1: Build
    after_r1: datetime
    r2: Build
    after_r2: datetime
    after_delete: datetime


@pytest.fixture
def timeline(kb: KnowledgeBase) -> Timeline:
    """`policy` r1 goes live, then r2, then the document is deleted; `other` stays live."""
    publish(kb, "other", "An unrelated page about parking rules.")
    before = timezone.now()
    r1 = publish(kb, "policy", "Refund policy one: thirty days.")
    after_r1 = timezone.now()
    r2 = publish(kb, "policy", "Refund policy two: sixty days.")
    after_r2 = timezone.now()
    document_delete(document_id=r1.document_id)
    return Timeline(before, r1, after_r1, r2, after_r2, timezone.now())


@pytest.fixture
def historian(kb: KnowledgeBase) -> Client:
    _, plaintext = api_key_create(tenant=kb.tenant, name="auditor", can_read_history=True)
    return api(plaintext)


def as_of(client: Client, when: datetime, mode: str = "keyword", **extra: Any) -> Any:
    body = {"kb": "handbook", "query": "refund policy days", "mode": mode}
    response = search(client, {**body, "as_of": when.isoformat(), **extra})
    assert response.status_code == 200, response.content
    return response.json()


def builds_of(result: dict[str, Any]) -> set[int]:
    return {hit["build_id"] for hit in result["hits"] if hit["document_key"] == "policy"}


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_as_of_answers_with_the_build_live_at_that_time(
    timeline: Timeline, historian: Client, mode: str
) -> None:
    assert builds_of(as_of(historian, timeline.before, mode)) == set()
    assert builds_of(as_of(historian, timeline.after_r1, mode)) == {timeline.r1.pk}
    assert builds_of(as_of(historian, timeline.after_r2, mode)) == {timeline.r2.pk}
    assert builds_of(as_of(historian, timeline.after_delete, mode)) == set()


def test_the_answer_names_the_time_and_the_index_version(
    timeline: Timeline, historian: Client
) -> None:
    result = as_of(historian, timeline.after_r1)

    assert result["index_version"] == 1
    assert result["as_of"].startswith(timeline.after_r1.strftime("%Y-%m-%dT%H:%M:%S"))
    assert result["unretained_documents"] == 0
    assert "took_ms" in result


def test_a_restore_and_a_rollback_are_part_of_the_history(
    timeline: Timeline, historian: Client
) -> None:
    document_restore(document_id=timeline.r1.document_id)
    document_rollback(document_id=timeline.r1.document_id, build_id=timeline.r1.pk, actor=None)
    now = timezone.now()

    assert builds_of(as_of(historian, now)) == {timeline.r1.pk}
    assert builds_of(as_of(historian, timeline.after_r2)) == {timeline.r2.pk}


def test_filters_and_access_groups_apply_to_history_too(
    kb: KnowledgeBase, historian: Client
) -> None:
    publish(kb, "payroll", "Refund policy for payroll errors.", groups=("finance",))
    publish(kb, "policy", "Refund policy one: thirty days.")
    now = timezone.now()

    assert {h["document_key"] for h in as_of(historian, now)["hits"]} == {"policy"}
    filtered = as_of(historian, now, document_keys=["payroll"])
    assert filtered["hits"] == []
    assert filtered["unretained_documents"] == 0


def test_builds_no_longer_retained_are_counted_not_searched(
    timeline: Timeline, historian: Client
) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM kb_posting WHERE chunk_id IN "
            "(SELECT id FROM kb_chunk WHERE build_id = %s)",
            [timeline.r1.pk],
        )
        cursor.execute("DELETE FROM kb_chunk WHERE build_id = %s", [timeline.r1.pk])
    Build.objects.filter(pk=timeline.r1.pk).update(collected_at=timezone.now())

    result = as_of(historian, timeline.after_r1)

    assert builds_of(result) == set()
    assert result["unretained_documents"] == 1


def test_only_index_admins_may_search_history(timeline: Timeline, api_key: str) -> None:
    response = search(
        api(api_key),
        {"kb": "handbook", "query": "refund", "as_of": timeline.after_r1.isoformat()},
    )

    assert response.status_code == 403
    assert "index admins" in response.json()["detail"]


def test_staff_sessions_may_search_history(timeline: Timeline) -> None:
    user = User.objects.create_user("ops", password="a-long-test-password", is_staff=True)
    TenantMembership.objects.create(user=user, tenant=timeline.r1.kb.tenant)
    client = Client()
    client.force_login(user)

    assert builds_of(as_of(client, timeline.after_r1)) == {timeline.r1.pk}


@pytest.mark.parametrize(
    ("offset", "words"),
    [(timedelta(days=1), "future"), (-timedelta(days=31), "retention window")],
)
def test_as_of_outside_the_retention_window_is_a_400(
    kb: KnowledgeBase, historian: Client, offset: timedelta, words: str
) -> None:
    when = timezone.now() + offset
    response = search(historian, {"kb": "handbook", "query": "x", "as_of": when.isoformat()})

    assert response.status_code == 400
    assert words in response.json()["detail"]["as_of"][0]


def test_the_retention_refusal_names_the_earliest_time_that_can_be_searched(
    kb: KnowledgeBase, historian: Client
) -> None:
    before = timezone.now() - timedelta(days=kb.retention_days)
    response = search(
        historian,
        {"kb": "handbook", "query": "x", "as_of": (before - timedelta(days=1)).isoformat()},
    )
    after = timezone.now() - timedelta(days=kb.retention_days)

    message = response.json()["detail"]["as_of"][0]
    named = datetime.strptime(message.split("searched is ")[1][:20], "%Y-%m-%dT%H:%M:%SZ")
    named = named.replace(tzinfo=UTC)
    assert before.replace(microsecond=0) <= named <= after
    assert message.endswith("(UTC).")
