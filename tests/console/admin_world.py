"""Two tenants for the admin's isolation tests.

Tenant A ("alphaxq") is the one nobody here may see: every name, slug, key, title, text and API
key name of it contains MARK_A, so a page leaks it iff MARK_A is in its HTML. Tenant B ("beta")
is the users' own; its document `salaries` is behind the access group `hr` and carries MARK_HR.
The rows each part created are recorded per model from the database itself (not through the
admin under test), so a test knows which ids are another tenant's or restricted."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.contrib.auth.models import Group, Permission, User
from django.db.models import Model
from django.test import Client

from evaluation.models import Calibration, EvaluationRun, Question
from evaluation.services.question_sets import question_set_create
from evaluation.services.runs import evaluation_request
from ingestion.pipeline.run import task_execute
from kb.access import Reader
from kb.models import Build, Document, KnowledgeBase, Tenant, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.index_versions import knowledge_base_create
from kb.services.metadata import metadata_field_save
from retrieval.principals import api_key_create
from tests.retrieval.factories import build, publish, upload
from work.models import AuditEvent, IngestionTask

MARK_A = "alphaxq"
MARK_HR = "hrsecretxq"
PASSWORD = "a-long-test-password"

Ids = dict[type[Model], set[Any]]


def _all_ids() -> Ids:
    return {m: set(m._default_manager.values_list("pk", flat=True)) for m in apps.get_models()}


def _created(before: Ids, after: Ids) -> Ids:
    return {m: after[m] - before.get(m, set()) for m in after if after[m] - before.get(m, set())}


def _recorded(part: Callable[[], Any]) -> tuple[Any, Ids]:
    before = _all_ids()
    result = part()
    return result, _created(before, _all_ids())


@dataclass
class World:
    tenant_a: Tenant
    tenant_b: Tenant
    kb_b: KnowledgeBase
    open_doc: Document  # tenant B, no access groups
    hr_doc: Document  # tenant B, access group hr
    ids_a: Ids  # every row tenant A's part created
    ids_b: Ids  # tenant B's rows outside the hr document
    ids_hr: Ids  # the rows of the hr document (its revisions, builds, tasks, events...)
    users: dict[str, User] = field(default_factory=dict)

    def client(self, name: str) -> Client:
        client = Client()
        client.force_login(self.users[name])
        return client


def _two_revisions(kb: KnowledgeBase, key: str, text: str, groups: tuple[str, ...] = ()) -> None:
    """r1 live, r2 built and waiting for approval."""
    publish(kb, key, f"# {key}\n\n{text}", groups)
    KnowledgeBase.objects.filter(pk=kb.pk).update(require_approval=True)
    build(upload(kb, key, f"# {key}\n\n{text} Second revision."))
    KnowledgeBase.objects.filter(pk=kb.pk).update(require_approval=False)


def _evaluated(kb: KnowledgeBase, name: str, questions: list[tuple[str, list[str], str]]) -> None:
    """A question set of `kb` and a finished run of it, asked as a reader of every group."""
    question_set = question_set_create(kb=kb, name=name)
    for number, (text, keys, passage) in enumerate(questions):
        Question.objects.create(
            question_set=question_set,
            external_id=f"q{number}",
            text=text,
            expected_keys=keys,
            expected_passage=passage,
            language="en",
        )
    run, _ = evaluation_request(
        kb=kb,
        question_set=question_set,
        modes=["keyword"],
        reader=Reader(tenant_id=kb.tenant_id, access_groups=frozenset(), all_groups=True),
    )
    assert run.task_id is not None
    IngestionTask.objects.filter(pk=run.task_id).update(available_at=None)
    task_execute(task_id=run.task_id, worker_id="world")
    assert EvaluationRun.objects.get(pk=run.pk).state == "succeeded"
    # a calibration of the set, as computed, naming its questions and documents
    text, keys, _ = questions[0]
    version = KnowledgeBase.objects.get(pk=kb.pk).active_index_version
    assert version is not None
    Calibration.objects.create(
        kb=kb,
        question_set=question_set,
        question_set_version=question_set.version,
        index_version=version,
        state=Calibration.State.CANDIDATE,
        default_mrr=0.5,
        candidate_mrr=1.0,
        folds=[{"n": 1, "default_mrr": 0.5, "candidate_mrr": 1.0}],
        per_question=[
            {
                "question": None,
                "external_id": "q0",
                "text": text,
                "expected": keys,
                "default": ["other", *keys],
                "candidate": keys,
            }
        ],
    )


def _tenant_a() -> Tenant:
    tenant = Tenant.objects.create(name=f"{MARK_A} corporation", slug=MARK_A)
    handbook = knowledge_base_create(tenant=tenant, name=f"{MARK_A} handbook", slug=f"{MARK_A}-hb")
    knowledge_base_create(tenant=tenant, name=f"{MARK_A} policies", slug=f"{MARK_A}-policies")
    metadata_field_save(kb=handbook, name=f"{MARK_A}_dept", type="string")
    _two_revisions(handbook, f"{MARK_A}-travel", f"{MARK_A} trains are reimbursed.")
    Document.objects.filter(key=f"{MARK_A}-travel").update(title=f"{MARK_A} travel policy")
    api_key_create(tenant=tenant, name=f"{MARK_A}-bot", knowledge_bases=[handbook])
    _evaluated(
        handbook,
        f"{MARK_A} questions",
        [(f"{MARK_A} trains", [f"{MARK_A}-travel"], f"{MARK_A} trains are reimbursed")],
    )
    AuditEvent.objects.create(
        kind="anomaly:visibility_violation",
        kb=handbook,
        subject_type="publication",
        subject_id=1,
        escalated=True,
        details={"detail": f"{MARK_A} planted"},
    )
    return tenant


def _tenant_b() -> tuple[Tenant, KnowledgeBase, Document]:
    tenant = Tenant.objects.create(name="Beta", slug="beta")
    kb = knowledge_base_create(tenant=tenant, name="Beta handbook", slug="handbook")
    knowledge_base_create(tenant=tenant, name="Beta policies", slug="policies")
    metadata_field_save(kb=kb, name="department", type="string")
    _two_revisions(kb, "vacation", "Vacation is 25 days a year.")
    api_key_create(tenant=tenant, name="beta-bot", knowledge_bases=[kb])
    AuditEvent.objects.create(
        kind="anomaly:visibility_violation",
        kb=kb,
        subject_type="publication",
        subject_id=1,
        escalated=True,
        details={"detail": "beta planted"},
    )
    return tenant, kb, Document.objects.get(kb=kb, key="vacation")


def _hr_document(kb: KnowledgeBase) -> Document:
    _two_revisions(kb, "salaries", f"{MARK_HR} pay bands.", ("hr",))
    Document.objects.filter(kb=kb, key="salaries").update(title=f"{MARK_HR} salaries")
    return Document.objects.get(kb=kb, key="salaries")


def staff(name: str, role: str, tenant: Tenant, groups: list[str] | None = None) -> User:
    user = User.objects.create_user(name, password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    TenantMembership.objects.create(user=user, tenant=tenant, access_groups=groups or [])
    return user


def build_world() -> World:
    ensure_roles(Group, Permission)
    tenant_a, ids_a = _recorded(_tenant_a)
    (tenant_b, kb_b, open_doc), ids_b = _recorded(_tenant_b)
    hr_doc, ids_hr = _recorded(lambda: _hr_document(kb_b))
    # the users' own evaluation, asked by a reader of every group: its answers name the hr
    # document, which only hr members may see (the others as counts)
    _, ids_evaluation = _recorded(
        lambda: _evaluated(
            kb_b,
            "Beta questions",
            [
                ("pay bands", ["salaries", "vacation"], f"{MARK_HR} pay bands"),
                ("vacation days", ["vacation"], ""),
            ],
        )
    )
    for model, ids in ids_evaluation.items():
        ids_b.setdefault(model, set()).update(ids)
    assert Build.objects.filter(document=hr_doc, state=Build.State.READY).exists()
    world = World(tenant_a, tenant_b, kb_b, open_doc, hr_doc, ids_a, ids_b, ids_hr)
    world.users = {
        "carol": staff("carol", CONTENT_MANAGERS, tenant_b),  # content manager, not in hr
        "harry": staff("harry", CONTENT_MANAGERS, tenant_b, ["hr"]),  # content manager in hr
        "ian": staff("ian", INDEX_ADMINS, tenant_b),  # index admin, not in hr
    }
    return world
