"""Swapping a knowledge base's index version (`kb.services.index_versions`): refused until the
candidate covers every document, rolled back to a version kept up to date, one winner among
concurrent swaps, and a p1 knowledge base moved to BM25 by a new version."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from kb.models import PIPELINE_VERSION, IndexVersion, KnowledgeBase, Posting
from kb.services.base import ActionRefused
from kb.services.index_versions import (
    index_version_activate,
    index_version_create,
    index_version_rollback,
)
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.helpers import run_pending
from tests.kb.publishing import publish, race

pytestmark = pytest.mark.django_db(transaction=True)


def test_index_version_swap_coverage_and_rollback(kb: KnowledgeBase, admin_user: User) -> None:
    publish(kb, "a", "Alpha text about rivers.")
    publish(kb, "b", "Beta text about mountains.")
    v1 = kb.active_index_version
    assert v1 is not None
    v2 = index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-v2",
        dimensions=128,
        chunk_size=400,
        chunk_overlap=50,
        actor=admin_user,
    )
    # not built yet: the swap is refused with the list of what is missing
    with pytest.raises(ActionRefused, match="a: no live build yet"):
        index_version_activate(version_id=v2.pk, actor=admin_user)

    run_pending()
    index_version_activate(version_id=v2.pk, actor=admin_user, expected_active_id=v1.pk)
    kb.refresh_from_db()
    assert kb.active_index_version_id == v2.pk
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    result = search(principal=principal, kb=kb, query="rivers")
    assert result.index_version == 2 and result.hits[0].document_key == "a"

    # an upload after the swap is built into the retained v1 too, so rollback is not stale
    publish(kb, "a", "Alpha text rewritten about lakes.")
    index_version_rollback(kb_id=kb.pk, actor=admin_user)
    kb.refresh_from_db()
    assert kb.active_index_version_id == v1.pk
    hits = search(principal=principal, kb=kb, query="lakes").hits
    assert hits and hits[0].revision == 2 and "lakes" in hits[0].text
    call_command("kb_verify")


def test_concurrent_swaps_have_one_winner(kb: KnowledgeBase) -> None:
    publish(kb, "a", "Some text.")
    v1 = kb.active_index_version
    assert v1 is not None
    candidates = [
        index_version_create(
            kb_id=kb.pk,
            provider="hash",
            model=f"m{i}",
            dimensions=64,
            chunk_size=400,
            chunk_overlap=0,
        )
        for i in range(2)
    ]
    run_pending()
    outcomes = race(
        **{
            f"swap{v.number}": (
                lambda v=v: index_version_activate(
                    version_id=v.pk, actor=None, expected_active_id=v1.pk
                )
            )
            for v in candidates
        }
    )
    assert sorted(o.split(":")[0] for o in outcomes.values()) == ["refused", "won"], outcomes
    assert IndexVersion.objects.filter(kb=kb, state="active").count() == 1
    call_command("kb_verify")


def test_a_p1_knowledge_base_moves_to_bm25_through_a_new_index_version(
    kb: KnowledgeBase, admin_user: User
) -> None:
    """Given a knowledge base whose active version predates p2 (tsvector keyword leg), when an
    index admin builds a new version and swaps, then keyword search serves BM25 over postings,
    and the old version kept serving its own way until the swap."""
    v1 = kb.active_index_version
    assert v1 is not None
    IndexVersion.objects.filter(pk=v1.pk).update(pipeline_version="p1")
    kb.refresh_from_db()
    publish(kb, "a", "Vacuum reclaims storage occupied by dead tuples.")
    publish(kb, "b", "Indexes speed up reads at the cost of writes.")
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    assert not Posting.objects.exists()
    before = search(principal=principal, kb=kb, query="vacuum", mode="keyword")
    assert [h.document_key for h in before.hits] == ["a"]

    v2 = index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-v1",
        dimensions=384,
        chunk_size=800,
        chunk_overlap=100,
        actor=admin_user,
    )
    assert v2.pipeline_version == PIPELINE_VERSION != "p1"
    run_pending()
    # still v1's tsvector ranking while v2 is only built
    during = search(principal=principal, kb=kb, query="vacuum", mode="keyword")
    assert during.index_version == 1 and [h.document_key for h in during.hits] == ["a"]
    index_version_activate(version_id=v2.pk, actor=admin_user, expected_active_id=v1.pk)

    kb.refresh_from_db()
    after = search(principal=principal, kb=kb, query="vacuuming indexes", mode="keyword")
    assert after.index_version == 2
    assert {h.document_key for h in after.hits} == {"a", "b"}  # stems: vacuum, index
    assert Posting.objects.filter(index_version=v2).exists()
    assert not Posting.objects.filter(index_version=v1).exists()
    call_command("kb_verify")
