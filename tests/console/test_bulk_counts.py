"""Issue 26, item 7: a bulk confirmation counts what changes, not the selection; lists what does
not change and why; bulk approve shows each document's chunk diff; bulk delete warns that search
changes only when something selected is served."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client

from kb.models import Build, Document, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.publication import build_approve
from tests.console.admin_world import staff
from tests.helpers import run_pending, upload_text
from tests.kb.publishing import publish
from tests.kb.test_swap_with_known_failures import upload_broken

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/kb/document/"


def login(kb: KnowledgeBase, name: str, role: str) -> Client:
    ensure_roles(Group, Permission)
    client = Client()
    client.force_login(staff(name, role, kb.tenant))
    return client


def confirmation(client: Client, action: str, documents: list[Document]) -> str:
    response = client.post(LIST, {"action": action, "_selected_action": [d.pk for d in documents]})
    assert response.status_code == 200
    return re.sub(r"\s+", " ", response.content.decode())


def test_bulk_approve_counts_what_changes_and_shows_each_diff(approval_kb: KnowledgeBase) -> None:
    kb = approval_kb
    for n in range(5):
        upload_text(kb, f"policy-{n}", f"Policy number {n}: expenses are reimbursed monthly.")
    run_pending()
    first = Build.objects.get(document__key="policy-0", state=Build.State.READY)
    build_approve(build_id=first.pk, actor=None, reason="first", expected_live_build_id=None)
    documents = list(Document.objects.filter(kb=kb).order_by("key"))

    page = confirmation(login(kb, "ian", INDEX_ADMINS), "approve_selected", documents)
    assert "<title>Approve 4 documents" in page and 'value="Yes, approve 4 documents"' in page
    assert "Will change (4 of 5 selected)" in page and "Not changed (1)" in page
    assert "policy-0" in page.split('id="skipped"')[1] and "nothing awaits approval" in page
    # every document's diff: its chunks counted, the new text shown
    assert page.count('class="bulk-diff"') == 4
    assert "chunks: 0 changed, 1 added, 0 removed, 0 unchanged" in page
    assert "<ins>Policy number 3: expenses are reimbursed monthly.</ins>" in page


def test_bulk_delete_warns_only_when_search_changes(kb: KnowledgeBase) -> None:
    served = publish(kb, "travel", "Train tickets are reimbursed in second class.").document
    broken = Document.objects.get(pk=upload_broken(kb, "scan").document_id)
    run_pending()
    carol = login(kb, "carol", CONTENT_MANAGERS)

    quiet = confirmation(carol, "delete_selected_documents", [broken])
    assert 'id="danger-note"' not in quiet and 'canon-confirm delete-confirmation"' not in quiet
    assert "Delete 1 document" in quiet
    assert "nothing of it is served, so search does not change" in quiet

    loud = confirmation(carol, "delete_selected_documents", [served, broken])
    assert 'id="danger-note"' in loud and "Will change (2)" in loud
    assert "search stops returning it (serving r1 now)" in loud
