"""The claim mapping in the admin: superusers only (a row decides which tenant people land in),
every change on the audit trail with who made it and what it was before and after, the rows of
CANON_IDENTITY_MAPPING shown beside the admin's, and a knowledge base of another tenant refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from identity import audit
from identity.models import ClaimMapping
from kb.models import KnowledgeBase, Tenant, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS
from kb.services.index_versions import knowledge_base_create
from work.models import AuditEvent

URL = "/admin/identity/claimmapping/"


@pytest.fixture
def root(tenant: Tenant) -> Client:
    user = User.objects.create_superuser("root", "", "a-long-test-password")
    TenantMembership.objects.create(user=user, tenant=tenant)
    client = Client()
    client.force_login(user)
    return client


def test_a_mapping_added_changed_and_deleted_is_on_the_audit_trail(
    root: Client, tenant: Tenant, kb: KnowledgeBase, roles: None
) -> None:
    form = {
        "claim": "groups",
        "value": "finance-team",
        "tenant": tenant.pk,
        "role": "",
        "access_groups": "finance",
        "knowledge_bases": [kb.pk],
    }
    assert root.post(f"{URL}add/", form).status_code == 302
    mapping = ClaimMapping.objects.get()
    assert mapping.access_groups == ["finance"] and list(mapping.knowledge_bases.all()) == [kb]
    changed = {**form, "role": CONTENT_MANAGERS, "access_groups": "finance,audit"}
    assert root.post(f"{URL}{mapping.pk}/change/", changed).status_code == 302
    assert root.post(f"{URL}{mapping.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not ClaimMapping.objects.exists()

    added, edited, deleted = AuditEvent.objects.filter(kind=audit.MAPPING_CHANGED).order_by("pk")
    root_id = User.objects.get(username="root").pk
    assert {added.actor_id, edited.actor_id, deleted.actor_id} == {root_id}
    assert added.details["before"] is None
    assert added.details["after"] == {
        "claim": "groups",
        "value": "finance-team",
        "tenant": "acme",
        "role": "",
        "access_groups": ["finance"],
        "knowledge_bases": ["handbook"],
    }
    assert edited.details["before"]["role"] == "" and edited.details["after"]["role"] == (
        CONTENT_MANAGERS
    )
    assert edited.details["after"]["access_groups"] == ["audit", "finance"]
    assert deleted.details["after"] is None and deleted.details["before"]["role"] == (
        CONTENT_MANAGERS
    )
    assert "claim mapping groups=finance-team deleted" in deleted.action


def test_a_save_that_changes_nothing_records_nothing(
    root: Client, tenant: Tenant, roles: None
) -> None:
    mapping = ClaimMapping.objects.create(
        claim="groups", value="editors", tenant=tenant, role=CONTENT_MANAGERS
    )
    form = {"claim": "groups", "value": "editors", "tenant": tenant.pk, "role": CONTENT_MANAGERS}
    assert root.post(f"{URL}{mapping.pk}/change/", form).status_code == 302
    assert not AuditEvent.objects.filter(kind=audit.MAPPING_CHANGED).exists()


def test_a_knowledge_base_of_another_tenant_is_refused(root: Client, tenant: Tenant) -> None:
    other = Tenant.objects.create(name="Globex", slug="globex")
    wiki = knowledge_base_create(tenant=other, name="Wiki", slug="wiki")
    answer = root.post(
        f"{URL}add/",
        {"claim": "groups", "value": "x", "tenant": tenant.pk, "knowledge_bases": [wiki.pk]},
    )
    assert answer.status_code == 200
    assert "Not knowledge bases of Acme: wiki." in answer.content.decode()
    assert not ClaimMapping.objects.exists()


def test_only_superusers_see_or_change_the_mapping(tenant: Tenant, roles: None) -> None:
    admin = User.objects.create_user("ian", password="a-long-test-password", is_staff=True)
    admin.groups.add(Group.objects.get(name=INDEX_ADMINS))
    TenantMembership.objects.create(user=admin, tenant=tenant)
    client = Client()
    client.force_login(admin)
    assert client.get(URL).status_code == 403
    assert client.post(f"{URL}add/", {"claim": "groups", "value": "x"}).status_code == 403
    assert "Claim mappings" not in client.get("/admin/").content.decode()


def test_the_settings_rows_are_shown_beside_the_admins(root: Client, settings: Any) -> None:
    settings.IDENTITY_MAPPING = json.dumps(
        [{"value": "canon-admins", "tenant": "acme", "role": INDEX_ADMINS}]
    )
    page = root.get(URL).content.decode()
    assert "From the deployment's settings (CANON_IDENTITY_MAPPING)" in page
    assert "canon-admins" in page and INDEX_ADMINS in page
