"""Retention (`kb.services.retention`): builds past retention that nothing references are
collected with their chunks, postings and statistics; a build rolled back to is spared, as
the collector checks again under the build's lock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from kb.models import Build, Chunk, KnowledgeBase, LexicalStat, Posting, Publication
from kb.services.base import ActionRefused
from kb.services.publication import document_rollback
from kb.services.retention import _build_give_up, retention_collect
from tests.kb.publishing import publish

pytestmark = pytest.mark.django_db(transaction=True)


def test_gc_collects_only_unreferenced_builds_past_retention(kb: KnowledgeBase) -> None:
    old = publish(kb, "doc", "Old text. " * 50)
    live = publish(kb, "doc", "New text. " * 50)
    kb.require_approval = True
    kb.save()
    pending = publish(kb, "doc", "Waiting text. " * 50)  # ready, awaiting approval
    long_ago = timezone.now() - timedelta(days=kb.retention_days + 1)
    Build.objects.filter(pk__in=[old.pk, live.pk, pending.pk]).update(updated_at=long_ago)

    assert retention_collect() > 0

    old.refresh_from_db()
    assert old.collected_at is not None and not Chunk.objects.filter(build=old).exists()
    # its keyword postings and its share of the BM25 statistics went with it
    assert not LexicalStat.objects.filter(build=old).exists()
    assert Posting.objects.filter(index_version=old.index_version).exists()
    assert not Posting.objects.exclude(chunk__build__in=[live, pending]).exists()
    for kept in (live, pending):
        kept.refresh_from_db()
        assert kept.collected_at is None
        assert Chunk.objects.filter(build=kept).count() == kept.expected_chunk_count
    assert retention_collect() == 0
    with pytest.raises(ActionRefused, match="garbage-collected"):
        document_rollback(document_id=old.document_id, build_id=old.pk, actor=None)
    call_command("kb_verify")


def test_retention_rechecks_under_the_build_lock_and_spares_a_build_rolled_back_to(
    kb: KnowledgeBase,
) -> None:
    old = publish(kb, "doc", "Old text. " * 50)
    publish(kb, "doc", "New text. " * 50)
    long_ago = timezone.now() - timedelta(days=kb.retention_days + 1)
    Build.objects.filter(pk=old.pk).update(updated_at=long_ago)
    # what retention read as eligible just before a rollback made the old build live again
    eligible = Build.objects.filter(collected_at__isnull=True, updated_at__lt=timezone.now())
    eligible = eligible.exclude(pk__in=Publication.objects.values("build_id"))
    assert old.pk in set(eligible.values_list("pk", flat=True))
    document_rollback(document_id=old.document_id, build_id=old.pk, actor=None)

    _build_give_up(old.pk, eligible, timezone.now())

    old.refresh_from_db()
    assert old.state == Build.State.LIVE and old.collected_at is None
    assert Chunk.objects.filter(build=old).count() == old.expected_chunk_count
    call_command("kb_verify")
