"""Issue 26, item 16: setting up a user is one page — the user's roles and their tenant
membership (tenant and access groups, with help) on the user's own page."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from kb.models import Tenant, TenantMembership
from kb.roles import CONTENT_MANAGERS, ensure_roles

pytestmark = pytest.mark.django_db


def test_roles_and_membership_on_the_user_page(admin_user: User, tenant: Tenant) -> None:
    ensure_roles(Group, Permission)
    carol = User.objects.create_user("carol", password="a-long-test-password")
    client = Client()
    client.force_login(admin_user)
    url = f"/admin/auth/user/{carol.pk}/change/"
    page = client.get(url).content.decode()
    assert 'name="tenant_membership-0-tenant"' in page
    assert 'name="tenant_membership-0-access_groups"' in page
    assert "Comma-separated, e.g. finance,hr." in page
    assert "A role never widens which documents the user sees" in page

    form = {
        "username": "carol",
        "is_active": "on",
        "is_staff": "on",
        "groups": [Group.objects.get(name=CONTENT_MANAGERS).pk],
        "date_joined_0": "2026-12-01",
        "date_joined_1": "10:00:00",
        "tenant_membership-TOTAL_FORMS": "1",
        "tenant_membership-INITIAL_FORMS": "0",
        "tenant_membership-MIN_NUM_FORMS": "0",
        "tenant_membership-MAX_NUM_FORMS": "1",
        "tenant_membership-0-tenant": tenant.pk,
        "tenant_membership-0-access_groups": "finance,hr",
        "tenant_membership-0-user": carol.pk,
    }
    response = client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:3000]
    membership = TenantMembership.objects.get(user=carol)
    assert (membership.tenant_id, membership.access_groups) == (tenant.pk, ["finance", "hr"])
    carol.refresh_from_db()
    assert carol.is_staff and carol.groups.filter(name=CONTENT_MANAGERS).exists()
