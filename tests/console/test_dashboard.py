"""The consistency dashboard: what it shows, who may see it, and a pinned query count under a
load of 10,000 tasks."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.utils import timezone

from kb.models import KnowledgeBase, Tenant, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from work import jobs
from work.models import AuditEvent, IngestionTask, OutboxEvent

pytestmark = pytest.mark.django_db

URL = "/admin/ingestion/ingestiontask/dashboard/"


def login(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def staff(name: str, group: str, tenant: Tenant) -> User:
    ensure_roles(Group, Permission)
    user = User.objects.create_user(name, password="a-long-test-password", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    TenantMembership.objects.create(user=user, tenant=tenant)
    return user


def load(kb: KnowledgeBase, n: int) -> None:
    now = timezone.now()
    statuses = ["queued", "running", "retry_wait", "succeeded", "dead"]
    IngestionTask.objects.bulk_create(
        IngestionTask(
            kind="build",
            kb=kb,
            status=statuses[i % len(statuses)],
            attempt=1,
            lease_owner="w" if i % 5 == 1 else "",
            available_at=now,
            lease_expires_at=now + timedelta(seconds=30) if i % 5 == 1 else None,
            last_error="boom" if i % 5 == 4 else "",
        )
        for i in range(n)
    )
    AuditEvent.objects.create(
        kind="anomaly:visibility_violation",
        kb=kb,
        subject_type="publication",
        subject_id=1,
        escalated=True,
        details={"detail": "planted"},
    )


def test_the_dashboard_renders_10000_tasks_in_a_fixed_number_of_queries(
    kb: KnowledgeBase, admin_user: User, django_assert_num_queries: Any
) -> None:
    load(kb, 10_000)
    client = login(admin_user)
    client.get(URL)  # warm the session and content types

    # + chunks embedded in the last hour, by model; + sync runs holding deletions over a day
    with django_assert_num_queries(11):
        response = client.get(URL)

    page = response.content.decode()
    assert response.status_code == 200
    assert '<td class="count-queued">2000</td>' in page
    assert "visibility_violation: 1" in page
    assert "planted" in page


def test_index_admins_see_their_tenant_only_and_content_managers_nothing(
    kb: KnowledgeBase,
) -> None:
    load(kb, 10)
    other = Tenant.objects.create(name="Other", slug="other")
    outsider = staff("otto", INDEX_ADMINS, other)
    page = login(outsider).get(URL)
    assert page.status_code == 200
    assert "planted" not in page.content.decode()
    assert "count-queued" not in page.content.decode()
    assert login(staff("carol", CONTENT_MANAGERS, kb.tenant)).get(URL).status_code == 403


def test_kb_verify_on_demand_and_the_manual_queue(kb: KnowledgeBase, admin_user: User) -> None:
    load(kb, 5)
    client = login(admin_user)
    # the planted queued tasks have no outbox event: kb_verify says so
    assert "[task-can-run] task" in client.post(URL).content.decode()
    IngestionTask.objects.all().delete()
    assert 'id="verify-clean"' in client.post(URL).content.decode()

    anomaly = AuditEvent.objects.get(kind="anomaly:visibility_violation")
    dismiss = f"{URL}anomalies/{anomaly.pk}/dismiss/"
    assert client.post(dismiss, {"reason": ""}).status_code == 302
    anomaly.refresh_from_db()
    assert anomaly.resolved_at is None  # a reason is required
    client.post(dismiss, {"reason": "planted by the test"})
    anomaly.refresh_from_db()
    assert anomaly.resolved_at is not None and "planted by the test" in anomaly.action
    assert client.get(dismiss).status_code == 404  # POST only, and no longer open


def test_work_scheduled_for_later_is_not_lag(kb: KnowledgeBase, admin_user: User) -> None:
    """A purge due at the end of a 30-day retention window is neither waiting nor late."""
    later = timezone.now() + timedelta(days=30)
    task = IngestionTask.objects.create(kind="delete", kb=kb, available_at=later)
    OutboxEvent.objects.create(task=task, available_at=later)
    jobs.job_ran("sweeper")

    page = login(admin_user).get(URL).content.decode()

    assert '<td id="outbox-due">0</td>' in page
    assert '<td id="outbox-lag">—</td>' in page
    assert f'<td id="outbox-scheduled">1 (next {later:%Y-%m-%d %H:%M:%S} UTC, in 4' in page
    assert "count-queued" not in page
    assert f'<td class="count-scheduled">1 (next {later:%Y-%m-%d %H:%M:%S} UTC' in page
    assert re.search(
        r'class="last-run">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(0\xa0minutes ago\)', page
    )
    assert "every 15 s" in page and "every 5 min" in page
