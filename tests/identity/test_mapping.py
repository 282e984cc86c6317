"""The claim mapping read alone: which values of which claims match which rows, the rows of
the settings beside the admin's, and a claim that maps to nothing granting nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from identity.mapping import claim_values, grants_of
from identity.models import ClaimMapping
from kb.models import KnowledgeBase, Tenant
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS


def test_claim_values_read_lists_strings_scopes_and_nested_claims() -> None:
    claims = {
        "groups": ["Finance Team", "hr", 7, None, {"x": 1}],
        "department": "Finance Team",
        "scope": "openid kb:handbook  search",
        "realm_access": {"roles": ["canon-admin"]},
        "admin": True,
    }
    assert claim_values(claims, "groups") == ["Finance Team", "hr", "7"]
    assert claim_values(claims, "department") == ["Finance Team"]  # one value, spaces and all
    assert claim_values(claims, "scope") == ["openid", "kb:handbook", "search"]
    assert claim_values(claims, "realm_access.roles") == ["canon-admin"]
    assert claim_values(claims, "admin") == ["true"]
    assert claim_values(claims, "missing") == []
    assert len(claim_values({"groups": [str(i) for i in range(5000)]}, "groups")) == 1000


def test_values_give_the_union_of_their_rows_and_the_rest_give_nothing(
    tenant: Tenant, kb: KnowledgeBase
) -> None:
    ClaimMapping.objects.create(
        claim="groups", value="editors", tenant=tenant, role=CONTENT_MANAGERS
    )
    ClaimMapping.objects.create(
        claim="groups", value="finance", tenant=tenant, access_groups=["finance", "audit"]
    )
    scoped = ClaimMapping.objects.create(
        claim="scope", value="kb:handbook", tenant=tenant, access_groups=["handbook"]
    )
    scoped.knowledge_bases.set([kb])
    grants = grants_of({"groups": ["editors", "finance", "visitors"], "scope": "kb:handbook x"})
    assert grants.tenant_ids == {tenant.pk}
    assert grants.roles == {CONTENT_MANAGERS}
    assert grants.access_groups == {"finance", "audit", "handbook"}
    assert grants.kb_ids is None  # a matched row names no knowledge base: all of the tenant
    assert set(grants.unmatched) == {("groups", "visitors"), ("scope", "x")}

    only_scope = grants_of({"scope": "kb:handbook"})
    assert only_scope.kb_ids == {kb.pk}
    nothing = grants_of({"groups": ["visitors"], "roles": ["editors"]})
    assert nothing.grants == () and nothing.unmatched == (("groups", "visitors"),)


def test_rows_from_the_settings_count_beside_the_admins(
    tenant: Tenant, kb: KnowledgeBase, settings: Any
) -> None:
    settings.IDENTITY_MAPPING = json.dumps(
        [
            {"value": "admins", "tenant": "acme", "role": INDEX_ADMINS},
            {
                "claim": "scope",
                "value": "kb:handbook",
                "tenant": "acme",
                "knowledge_bases": ["handbook"],
            },
            {"value": "ghosts", "tenant": "no-such-tenant", "role": INDEX_ADMINS},
        ]
    )
    grants = grants_of({"groups": ["admins", "ghosts"], "scope": "kb:handbook"})
    assert grants.roles == {INDEX_ADMINS}
    assert grants.kb_ids is None  # the admins row names none
    assert [g.mapping_id for g in grants.grants] == [None, None]
    assert ("groups", "ghosts") in grants.unmatched  # its tenant does not exist: nothing


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("{", "is not JSON"),
        ('{"value": "x"}', "must be a JSON list"),
        ('[{"value": "x", "tenant": "acme", "role": "Boss"}]', "CANON_IDENTITY_MAPPING[0].role"),
        ('[{"value": "x", "tenant": "acme", "colour": "red"}]', "unknown field colour"),
        ('[{"tenant": "acme"}]', "CANON_IDENTITY_MAPPING[0].value"),
    ],
)
def test_a_wrong_settings_mapping_stops_the_start_naming_the_place(
    settings: Any, value: str, says: str
) -> None:
    settings.IDENTITY_MAPPING = value
    with pytest.raises(SystemCheckError, match=r"identity\.E001") as raised:
        call_command("check")
    assert says in str(raised.value)
