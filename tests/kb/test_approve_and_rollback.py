"""Approving a build and rolling a document back (`kb.services.publication`): the history names
who did what and why, a stale confirmation page is refused, and an approve racing a rollback
has one winner."""

from __future__ import annotations

from functools import partial

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from kb.models import Document, KnowledgeBase
from kb.services.base import ActionRefused
from kb.services.publication import build_approve, document_rollback
from tests.kb.publishing import live_revision, publish, race

pytestmark = pytest.mark.django_db(transaction=True)


def test_approve_then_rollback_with_history(approval_kb: KnowledgeBase, admin_user: User) -> None:
    r1 = publish(approval_kb, "doc", "First text about owls.")
    build_approve(build_id=r1.pk, actor=admin_user, reason="first")
    r2 = publish(approval_kb, "doc", "Second text about owls and bats.")
    document = Document.objects.get(key="doc")
    assert live_revision(document) == 1  # r2 waits for approval
    build_approve(
        build_id=r2.pk, actor=admin_user, reason="looks right", expected_live_build_id=r1.pk
    )
    assert live_revision(document) == 2

    document_rollback(
        document_id=document.pk,
        build_id=r1.pk,
        actor=admin_user,
        reason="bats are wrong",
        expected_live_build_id=r2.pk,
    )

    document.refresh_from_db()
    assert live_revision(document) == 1 and document.desired_revision == 1
    events = list(document.events.order_by("id").values_list("action", "reason", "actor"))
    assert events == [
        ("approve", "first", admin_user.pk),
        ("approve", "looks right", admin_user.pk),
        ("rollback", "bats are wrong", admin_user.pk),
    ]
    call_command("kb_verify")


def test_a_stale_confirmation_page_is_refused(approval_kb: KnowledgeBase) -> None:
    r1 = publish(approval_kb, "doc", "One.")
    build_approve(build_id=r1.pk, actor=None)
    r2 = publish(approval_kb, "doc", "Two.")
    with pytest.raises(ActionRefused, match="changed since you opened"):
        build_approve(build_id=r2.pk, actor=None, expected_live_build_id=r2.pk + 999)
    assert live_revision(Document.objects.get()) == 1


def test_concurrent_approve_and_rollback_have_one_winner(approval_kb: KnowledgeBase) -> None:
    for round_number in range(3):
        key = f"doc{round_number}"
        r1 = publish(approval_kb, key, f"{key} one.")
        build_approve(build_id=r1.pk, actor=None)
        r2 = publish(approval_kb, key, f"{key} two.")
        build_approve(build_id=r2.pk, actor=None)
        r3 = publish(approval_kb, key, f"{key} three.")
        document = Document.objects.get(key=key)
        outcomes = race(
            approve=partial(
                build_approve, build_id=r3.pk, actor=None, expected_live_build_id=r2.pk
            ),
            rollback=partial(
                document_rollback,
                document_id=document.pk,
                build_id=r1.pk,
                actor=None,
                expected_live_build_id=r2.pk,
            ),
        )
        assert sorted(o.split(":")[0] for o in outcomes.values()) == ["refused", "won"], outcomes
        winner = next(name for name, o in outcomes.items() if o == "won")
        assert live_revision(document) == (3 if winner == "approve" else 1)
    call_command("kb_verify")
