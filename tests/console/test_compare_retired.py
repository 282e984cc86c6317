"""Issue 26, item 11: a retired index version kept for rollback can be compared in test search
before it is swapped back (or rolled back to)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from kb.models import Build, IndexVersion, KnowledgeBase
from kb.services.index_versions import index_version_activate
from tests.console.test_test_search import candidate_version
from tests.retrieval.factories import publish

pytestmark = pytest.mark.django_db


def test_a_retired_version_can_be_compared_before_going_back(
    kb: KnowledgeBase, admin_user: User
) -> None:
    publish(kb, "travel", "Trains and buses are reimbursed in second class.")
    v1 = kb.active_index_version
    assert v1 is not None
    v2 = candidate_version(kb, admin_user)
    index_version_activate(version_id=v2.pk, actor=admin_user, expected_active_id=v1.pk)
    assert IndexVersion.objects.get(pk=v1.pk).state == IndexVersion.State.RETIRED
    client = Client()
    client.force_login(admin_user)
    url = f"/admin/kb/knowledgebase/{kb.pk}/search/"

    form = client.get(url).content.decode()
    assert f'<option value="{v1.pk}">v1 (retired, kept for rollback:' in form

    response = client.get(url, {"mode": "keyword", "query": "reimbursed", "compare": str(v1.pk)})
    active, retired = response.context["sides"]
    assert (active.version.number, retired.version.number) == (2, 1)
    assert retired.title == "Retired, kept for rollback" and retired.rows
    v1_builds = set(Build.objects.filter(index_version=v1).values_list("pk", flat=True))
    assert {r["hit"].build_id for r in retired.rows} <= v1_builds
    assert "retired, kept for rollback v1" in response.content.decode()
