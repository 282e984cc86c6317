"""Work queues on the document list (issue 13, item 4): a status filter computed in SQL with
counts, the knowledge-base filter kept with one knowledge base, the queue counts per user, and
bulk approve / retry / delete / restore behind confirmation pages that say what changes and
what is skipped, acting per item through the single-object services."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from ingestion.pipeline.run import task_execute
from kb.document_states import work_queue_counts
from kb.models import Build, Document, KnowledgeBase, Tenant
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.documents import document_delete
from kb.services.index_versions import knowledge_base_create
from kb.services.publication import build_approve
from tests.console.admin_world import staff
from tests.retrieval.factories import build, publish, upload
from work.models import AuditEvent, IngestionTask

pytestmark = pytest.mark.django_db

LIST = "/admin/kb/document/"


@dataclass
class Queues:
    kb: KnowledgeBase
    served: Document  # r1 live
    waiting: Document  # r1 live, r2 awaiting approval
    failed: Document  # r1 failed (an empty file)
    deleted: Document
    building: Document  # r1 uploaded, not built
    secret: Document  # awaiting approval, behind the access group hr
    ian: User  # index admin
    carol: User  # content manager


def _fail(kb: KnowledgeBase, key: str) -> Document:
    revision = upload(kb, key, "   \n\n  ")
    task = IngestionTask.objects.get(build__revision=revision)
    IngestionTask.objects.filter(pk=task.pk).update(available_at=None)
    assert task_execute(task_id=task.pk, worker_id="test") == "failed"
    return Document.objects.get(kb=kb, key=key)


@pytest.fixture
def queues(kb: KnowledgeBase) -> Queues:
    ensure_roles(Group, Permission)
    publish(kb, "served", "# Served\n\nServed text.")
    publish(kb, "waiting", "# Waiting\n\nFirst text.")
    publish(kb, "deleted", "# Deleted\n\nGone text.")
    publish(kb, "secret", "# Secret\n\nPay bands.", ("hr",))
    KnowledgeBase.objects.filter(pk=kb.pk).update(require_approval=True)
    build(upload(kb, "waiting", "# Waiting\n\nSecond text."))
    build(upload(kb, "secret", "# Secret\n\nNew pay bands."))
    failed = _fail(kb, "failed")
    upload(kb, "building", "# Building\n\nNot built yet.")
    document_delete(document_id=Document.objects.get(key="deleted").pk, reason="old")
    documents = {d.key: d for d in Document.objects.all()}
    return Queues(
        kb=kb,
        served=documents["served"],
        waiting=documents["waiting"],
        failed=failed,
        deleted=documents["deleted"],
        building=documents["building"],
        secret=documents["secret"],
        ian=staff("ian", INDEX_ADMINS, kb.tenant),
        carol=staff("carol", CONTENT_MANAGERS, kb.tenant),
    )


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _listed(client: Client, query: str = "") -> set[str]:
    response = client.get(LIST + query)
    assert response.status_code == 200
    return {d.key for d in response.context["cl"].result_list}


def _bulk(client: Client, action: str, documents: list[Document], **confirm: Any) -> Any:
    data: dict[str, Any] = {"action": action, "_selected_action": [d.pk for d in documents]}
    if confirm:
        first = client.post(LIST, data)
        assert first.status_code == 200, first
        data.update(post="yes", plan=[i.token for i in first.context["plan"].items], **confirm)
    return client.post(LIST, data, follow=bool(confirm))


def _messages(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_the_status_filter_counts_each_state_in_sql_among_readable_documents(
    queues: Queues,
) -> None:
    carol = _client(queues.carol)  # does not hold hr: the secret document is not counted
    page = carol.get(LIST).content.decode()
    for label in [
        "Served (2)",
        "Building (1)",
        "Awaiting approval (1)",
        "Failed (1)",
        "Deleted (1)",
        "Not served (2)",
    ]:
        assert label in page, label
    assert _listed(carol, "?status=served") == {"served", "waiting"}
    assert _listed(carol, "?status=awaiting_approval") == {"waiting"}
    assert _listed(carol, "?status=failed") == {"failed"}
    assert _listed(carol, "?status=building") == {"building"}
    assert _listed(carol, "?status=deleted") == {"deleted"}
    assert _listed(carol, "?status=not_served") == {"failed", "building"}
    # the queue box links to the same filter, with the same counts
    assert 'id="queue-awaiting_approval"' in page and "?status=awaiting_approval" in page
    # a superuser counts every document, the restricted one too
    root = User.objects.create_superuser("root", "", "a-long-test-password")
    assert "Awaiting approval (2)" in _client(root).get(LIST).content.decode()


def test_the_status_counts_follow_the_chosen_knowledge_base(queues: Queues) -> None:
    other = knowledge_base_create(tenant=queues.kb.tenant, name="Other", slug="other")
    publish(other, "elsewhere", "# Elsewhere\n\nText.")
    carol = _client(queues.carol)
    assert "Served (3)" in carol.get(LIST).content.decode()
    assert "Served (1)" in carol.get(f"{LIST}?kb__id__exact={other.pk}").content.decode()


def test_the_knowledge_base_filter_is_shown_with_a_single_knowledge_base(
    queues: Queues,
) -> None:
    response = _client(queues.carol).get(LIST)
    specs = {spec.title: spec for spec in response.context["cl"].filter_specs}
    assert specs["knowledge base"].has_output() and specs["status"].has_output()
    assert str(queues.kb) in response.content.decode()


def test_work_queue_counts_are_per_user(queues: Queues, tenant: Tenant) -> None:
    assert work_queue_counts(queues.carol) == {"awaiting_approval": 1, "failed": 1}
    hr = staff("harry", CONTENT_MANAGERS, queues.kb.tenant, ["hr"])
    assert work_queue_counts(hr) == {"awaiting_approval": 2, "failed": 1}
    outsider_tenant = Tenant.objects.create(name="Other", slug="other")
    outsider = staff("olga", INDEX_ADMINS, outsider_tenant)
    assert work_queue_counts(outsider) == {"awaiting_approval": 0, "failed": 0}


def test_bulk_approve_lists_what_changes_and_what_is_skipped_then_approves(
    queues: Queues,
) -> None:
    ian = _client(queues.ian)
    first = _bulk(ian, "approve_selected", [queues.served, queues.waiting, queues.deleted])
    assert first.status_code == 200
    page = first.content.decode()
    plan = first.context["plan"]
    assert [i.document.key for i in plan.items] == ["waiting"]
    assert "r2 goes live (serving r1 now)" in page
    skipped = dict((d.key, why) for d, why in plan.skipped)
    assert skipped == {"served": "nothing awaits approval (serving r1)", "deleted": "deleted"}
    assert 'name="reason"' in page

    done = _bulk(ian, "approve_selected", [queues.served, queues.waiting], reason="reviewed")
    assert "Approved 1: waiting r2." in _messages(done)
    live = Build.objects.get(document=queues.waiting, state=Build.State.LIVE)
    assert live.revision.number == 2
    entry = LogEntry.objects.get(object_id=str(queues.waiting.pk), user=queues.ian)
    assert entry.get_change_message() == "Approved revision 2 (bulk action): reviewed"


def test_a_bulk_action_needs_a_reason(queues: Queues) -> None:
    ian = _client(queues.ian)
    response = _bulk(ian, "approve_selected", [queues.waiting], reason="")
    assert response.status_code == 200 and response.context["form"].errors
    assert Build.objects.get(document=queues.waiting, revision__number=2).state == "ready"


def test_an_item_whose_state_moved_is_reported_and_the_others_still_happen(
    queues: Queues,
) -> None:
    ian = _client(queues.ian)
    KnowledgeBase.objects.filter(pk=queues.kb.pk).update(require_approval=True)
    build(upload(queues.kb, "served", "# Served\n\nServed text, second."))
    first = _bulk(ian, "approve_selected", [queues.served, queues.waiting])
    assert len(first.context["plan"].items) == 2
    # meanwhile someone approves "waiting" on its own page
    ready = Build.objects.get(document=queues.waiting, state=Build.State.READY)
    build_approve(build_id=ready.pk, actor=queues.ian, reason="single")
    done = ian.post(
        LIST,
        {
            "action": "approve_selected",
            "_selected_action": [queues.served.pk, queues.waiting.pk],
            "post": "yes",
            "plan": [i.token for i in first.context["plan"].items],
            "reason": "batch",
        },
        follow=True,
    )
    shown = _messages(done)
    assert "Approved 1: served r2." in shown
    assert any(
        m.startswith("Not approved: waiting: changed since the page was shown") for m in shown
    )


def test_a_content_manager_is_not_offered_bulk_approve_and_cannot_force_it(
    queues: Queues,
) -> None:
    carol = _client(queues.carol)
    choices = dict(carol.get(LIST).context["action_form"].fields["action"].choices)
    assert "approve_selected" not in choices
    assert {"retry_selected", "delete_selected_documents", "restore_selected"} <= set(choices)
    forced = carol.post(
        LIST,
        {
            "action": "approve_selected",
            "_selected_action": [queues.waiting.pk],
            "post": "yes",
            "reason": "x",
        },
    )
    assert forced.status_code in (200, 302)
    assert Build.objects.get(document=queues.waiting, revision__number=2).state == "ready"


def test_bulk_retry_requeues_failed_builds_with_the_reason(queues: Queues) -> None:
    carol = _client(queues.carol)
    first = _bulk(carol, "retry_selected", [queues.failed, queues.served])
    assert [i.document.key for i in first.context["plan"].items] == ["failed"]
    assert dict((d.key, w) for d, w in first.context["plan"].skipped) == {
        "served": "no failed build of its desired revision"
    }
    done = _bulk(carol, "retry_selected", [queues.failed, queues.served], reason="parser fixed")
    assert "Retried 1: failed r1." in _messages(done)
    failed_build = Build.objects.get(document=queues.failed)
    assert failed_build.state == Build.State.PENDING
    event = AuditEvent.objects.get(kind="build_retry", subject_id=failed_build.pk)
    assert event.details == {"reason": "parser fixed"}


def test_bulk_delete_shows_the_restore_date_and_skips_deleted_ones(queues: Queues) -> None:
    carol = _client(queues.carol)
    first = _bulk(carol, "delete_selected_documents", [queues.served, queues.deleted])
    page = first.content.decode()
    assert "restorable until 20" in page and " UTC" in page
    assert "delete-confirmation" in page and "canon-danger" in page
    assert [d.key for d, _ in first.context["plan"].skipped] == ["deleted"]
    done = _bulk(carol, "delete_selected_documents", [queues.served, queues.deleted], reason="x")
    assert "Deleted 1: served." in _messages(done)
    assert Document.objects.get(pk=queues.served.pk).deleted_at is not None


def test_bulk_restore_restores_deleted_ones_and_skips_the_rest(queues: Queues) -> None:
    carol = _client(queues.carol)
    first = _bulk(carol, "restore_selected", [queues.deleted, queues.served])
    assert [i.change for i in first.context["plan"].items] == ["search serves r1 again"]
    done = _bulk(carol, "restore_selected", [queues.deleted, queues.served], reason="needed")
    assert "Restored 1: deleted." in _messages(done)
    assert Document.objects.get(pk=queues.deleted.pk).deleted_at is None


def test_a_forged_plan_acts_only_on_selected_documents_the_user_may_see(queues: Queues) -> None:
    carol = _client(queues.carol)  # not in hr
    secret_build = Build.objects.get(document=queues.secret, state=Build.State.READY)
    response = carol.post(
        LIST,
        {
            "action": "delete_selected_documents",
            "_selected_action": [queues.served.pk, queues.secret.pk],
            "post": "yes",
            "plan": [f"{queues.secret.pk}::", f"{queues.served.pk}:{secret_build.pk}:"],
            "reason": "forged",
        },
        follow=True,
    )
    assert response.status_code == 200
    assert Document.objects.get(pk=queues.secret.pk).deleted_at is None
    assert Document.objects.get(pk=queues.served.pk).deleted_at is None  # wrong token: dropped
