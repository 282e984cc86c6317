"""The admin's approve and delete actions check roles and tenants: a content manager may delete
but not approve or manage index versions, an index admin may approve, another tenant's staff
sees nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from kb.models import Document, KnowledgeBase, Tenant, TenantMembership
from kb.roles import ensure_roles
from tests.kb.publishing import live_revision, publish

pytestmark = pytest.mark.django_db(transaction=True)


def role_user(name: str, group: str, tenant: Tenant) -> Client:
    ensure_roles(Group, Permission)  # the test database is flushed between tests
    user = User.objects.create_user(name, password="a-long-test-password", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    TenantMembership.objects.create(user=user, tenant=tenant)
    client = Client()
    client.force_login(user)
    return client


def test_admin_actions_check_roles_and_tenants(approval_kb: KnowledgeBase) -> None:
    r1 = publish(approval_kb, "doc", "Text.")
    document = Document.objects.get()
    content = role_user("carol", "Content managers", approval_kb.tenant)
    index_admin = role_user("ian", "Index admins", approval_kb.tenant)
    other_tenant = Tenant.objects.create(name="Other", slug="other")
    outsider = role_user("otto", "Index admins", other_tenant)
    approve = f"/admin/kb/document/{document.pk}/approve/{r1.pk}/"

    assert content.get(approve).status_code == 403
    assert outsider.get(approve).status_code == 404
    assert outsider.get(f"/admin/kb/document/{document.pk}/change/").status_code == 302
    page = index_admin.get(approve)
    assert page.status_code == 200 and b"1 added, 0 removed" in page.content
    assert index_admin.post(approve, {"reason": "ok"}).status_code == 302
    assert live_revision(document) == 1
    # content managers may delete and restore, but not manage index versions
    delete = f"/admin/kb/document/{document.pk}/soft-delete/"
    assert content.post(delete, {"reason": "obsolete"}).status_code == 302
    document.refresh_from_db()
    assert document.deleted_at is not None
    assert (
        content.get(f"/admin/kb/knowledgebase/{approval_kb.pk}/index-versions/new/").status_code
        == 403
    )
