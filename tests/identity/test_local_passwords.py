"""Local passwords beside the identity provider: kept for a break-glass superuser, switched off
for everyone else by CANON_LOCAL_PASSWORDS=superusers; every attempt on the audit trail, and
failures counted per address and name so that guessing is cut short."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from identity import audit
from kb.models import Tenant, TenantMembership
from work.models import AuditEvent

PASSWORD = "a-long-test-password"


def log_in(username: str, password: str = PASSWORD) -> Any:
    return Client().post("/admin/login/?next=/admin/", {"username": username, "password": password})


@pytest.fixture
def people(tenant: Tenant) -> None:
    root = User.objects.create_superuser("root", "", PASSWORD)
    staff = User.objects.create_user("sam", password=PASSWORD, is_staff=True)
    for user in (root, staff):
        TenantMembership.objects.create(user=user, tenant=tenant)


def test_passwords_work_for_everyone_by_default(people: None) -> None:
    assert log_in("sam").status_code == 302
    assert log_in("root").status_code == 302
    assert [e.details["provider"] for e in AuditEvent.objects.filter(kind=audit.SIGN_IN)] == [
        "password",
        "password",
    ]


def test_switched_off_for_everyone_but_the_break_glass_superuser(
    people: None, settings: Any
) -> None:
    settings.LOCAL_PASSWORDS = "superusers"
    refused = log_in("sam")
    assert refused.status_code == 200
    assert "Local passwords are switched off here except for the break-glass superuser" in (
        refused.content.decode()
    )
    assert log_in("root").status_code == 302
    [failure] = AuditEvent.objects.filter(kind=audit.SIGN_IN_REFUSED)
    assert failure.details["who"] == "sam"
    assert "superusers only" in failure.details["reason"]
    assert failure.details["address"] == "127.0.0.1"


def test_guessing_a_password_is_cut_short_and_recorded_without_the_password(
    people: None, settings: Any
) -> None:
    settings.SIGN_IN_MAX_FAILURES = 3
    for _ in range(3):
        assert "Please enter the correct username" in log_in("root", "guess-7Qx").content.decode()
    locked = log_in("root")  # the right password, too late
    assert locked.status_code == 200
    assert "Too many failed sign-ins from your address; try again in 15 minutes." in (
        locked.content.decode()
    )
    # another name from the same address is not locked by these (the address's limit is higher)
    assert log_in("sam").status_code == 302
    events = AuditEvent.objects.filter(kind=audit.SIGN_IN_REFUSED)
    assert [e.details["reason"] for e in events].count("rate limited") == 1
    assert all("guess-7Qx" not in str(e.details) and PASSWORD not in str(e.details) for e in events)
