"""Idempotency-Key replays answer only the principal that made the first request, and only
after the checks a fresh request passes (issue 14, item 1). Every replayable operation is
found in the code (views marked `@idempotent`) and replayed from every other kind of
principal of the same tenant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from kb.models import KnowledgeBase, Revision, TenantMembership
from kb.services.index_versions import knowledge_base_create
from retrieval.models import ApiKey, IdempotencyRecord
from retrieval.principals import api_key_create
from tests.retrieval.factories import api
from tests.retrieval.routes import Operation, api_operations

pytestmark = pytest.mark.django_db

K = "shared-idempotency-key"
Request = Callable[[Client, str, tuple[str, ...]], Any]


def upload_request(client: Client, idempotency_key: str, groups: tuple[str, ...]) -> Any:
    return client.post(
        "/api/v1/kbs/handbook/documents/",
        {
            "key": "reorg-plan",
            "file": SimpleUploadedFile("plan.txt", b"The reorganisation plan."),
            "access_groups": ",".join(groups),
        },
        headers={"Idempotency-Key": idempotency_key},
    )


# One request per replayable operation; a new @idempotent view needs its entry here.
REPLAYABLE: dict[tuple[str, str | None], Request] = {
    ("post", "document-list"): upload_request,
}


def replayable_operations() -> list[Operation]:
    return [op for op in api_operations() if getattr(op.handler, "idempotent", False)]


def test_every_replayable_operation_is_known_documented_and_tested() -> None:
    marked = {(op.method, op.name) for op in replayable_operations()}
    schema = Client().get("/api/schema/?format=json").json()
    documented = {
        (method, path)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if any(p["name"] == "Idempotency-Key" for p in operation.get("parameters", []))
    }

    assert marked == set(REPLAYABLE)
    assert documented == {(op.method, op.openapi_path) for op in replayable_operations()}


@pytest.fixture
def principals(kb: KnowledgeBase) -> dict[str, Client]:
    """The first requester (a key holding `hr`) and, in the same tenant, a key without it,
    a key holding `hr` limited to another knowledge base, and a session user holding `hr`."""
    knowledge_base_create(tenant=kb.tenant, name="Manual", slug="manual")
    _, first = api_key_create(tenant=kb.tenant, name="first", access_groups=["hr"])
    _, plain = api_key_create(tenant=kb.tenant, name="plain")
    _, other_kb = api_key_create(
        tenant=kb.tenant,
        name="manual only",
        access_groups=["hr"],
        knowledge_bases=kb.tenant.knowledge_bases.filter(slug="manual"),
    )
    user = User.objects.create_user("manager", password="a-long-test-password")
    user.user_permissions.add(Permission.objects.get(codename="add_document"))
    TenantMembership.objects.create(user=user, tenant=kb.tenant, access_groups=["hr"])
    session = Client()
    session.force_login(user)
    return {"first": api(first), "plain": api(plain), "other kb": api(other_kb), "user": session}


def fresh(request: Request, client: Client, groups: tuple[str, ...]) -> Any:
    """What the principal gets for the same request under an Idempotency-Key never used."""
    return request(client, f"fresh-{timezone.now().timestamp()}", groups)


@pytest.mark.parametrize("groups", [("hr",), ()], ids=["hr document", "open document"])
@pytest.mark.parametrize("operation", sorted(REPLAYABLE), ids=str)
@pytest.mark.parametrize("other", ["plain", "other kb", "user"])
def test_another_principals_request_with_the_same_key_is_its_own(
    principals: dict[str, Client],
    operation: tuple[str, str],
    groups: tuple[str, ...],
    other: str,
) -> None:
    request = REPLAYABLE[operation]
    original = request(principals["first"], K, groups)
    assert original.status_code == 201, original.content
    first_body = original.json()

    theirs = request(principals[other], K, groups)
    again = request(principals[other], K, groups)

    assert "Idempotent-Replayed" not in theirs.headers, "never the first principal's answer"
    assert theirs.json() != first_body
    if theirs.status_code == 201:  # a request of its own, recorded in its own namespace
        assert theirs.json()["revision"] == 2
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == theirs.json()
    else:  # refused exactly as a fresh request is (refusals are not recorded)
        assert (again.status_code, again.content) == (theirs.status_code, theirs.content)
        follow = fresh(request, principals[other], groups)
        assert (theirs.status_code, theirs.content) == (follow.status_code, follow.content)
    mine = request(principals["first"], K, groups)
    assert mine.headers["Idempotent-Replayed"] == "true"
    assert mine.json() == first_body, "the first principal's record is untouched"


EXPECTED_OTHER = {
    # a key without `hr`: the hr document's key is not its to write; the open one it revises
    ("plain", ("hr",)): (403, "permission_denied"),  # it asks for a group it lacks
    ("plain", ()): (201, None),
    ("other kb", ("hr",)): (404, "not_found"),  # the knowledge base is outside its scope
    ("other kb", ()): (404, "not_found"),
    ("user", ("hr",)): (201, None),
    ("user", ()): (201, None),
}


@pytest.mark.parametrize(("other", "groups"), sorted(EXPECTED_OTHER))
def test_what_the_other_principal_gets_instead(
    principals: dict[str, Client], other: str, groups: tuple[str, ...]
) -> None:
    upload_request(principals["first"], K, groups)

    response = upload_request(principals[other], K, groups)

    status, code = EXPECTED_OTHER[(other, groups)]
    assert response.status_code == status, response.content
    if code:
        assert response.json()["error"] == code


def test_the_issue_case_a_key_without_the_group_gets_no_replay(
    principals: dict[str, Client],
) -> None:
    """Item 1 as reported: the same upload without `access_groups` from a key lacking `hr`."""
    original = upload_request(principals["first"], K, ("hr",))
    document_id = original.json()["document_id"]

    def without_groups(client: Client, key: str) -> Any:
        return client.post(
            "/api/v1/kbs/handbook/documents/",
            {"key": "reorg-plan", "file": SimpleUploadedFile("plan.txt", b"Planted.")},
            headers={"Idempotency-Key": key},
        )

    response = without_groups(principals["plain"], K)

    assert response.status_code == 409
    assert response.json()["error"] == "key_unavailable"
    assert "Idempotent-Replayed" not in response.headers
    assert str(document_id) not in response.content.decode()
    assert response.content == without_groups(principals["plain"], "another").content
    assert Revision.objects.filter(document_id=document_id).count() == 1


@pytest.mark.parametrize("change", ["lost the group", "lost the knowledge base", "revoked"])
def test_the_first_principal_is_checked_again_before_a_replay(
    principals: dict[str, Client], kb: KnowledgeBase, change: str
) -> None:
    original = upload_request(principals["first"], K, ("hr",))
    assert original.status_code == 201
    key = ApiKey.objects.get(name="first")
    if change == "lost the group":
        ApiKey.objects.filter(pk=key.pk).update(access_groups=[])
    elif change == "lost the knowledge base":
        key.knowledge_bases.set(kb.tenant.knowledge_bases.filter(slug="manual"))
    else:
        ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())

    replay = upload_request(principals["first"], K, ("hr",))

    assert replay.status_code in (401, 403, 404), replay.content
    assert "Idempotent-Replayed" not in replay.headers
    assert str(original.json()["document_id"]) not in replay.content.decode()


def test_records_are_kept_per_principal(principals: dict[str, Client]) -> None:
    upload_request(principals["first"], K, ())
    upload_request(principals["user"], K, ())

    records = IdempotencyRecord.objects.order_by("pk").values_list("principal", "key")

    first, user = ApiKey.objects.get(name="first"), User.objects.get(username="manager")
    assert list(records) == [(f"key:{first.pk}", K), (f"user:{user.pk}", K)]
