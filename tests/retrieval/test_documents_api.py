"""Documents through the API: keyset pages, detail, idempotent uploads and their limits, deletes."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from kb.models import Build, Document, KnowledgeBase, Revision, TenantMembership
from retrieval.api import uploads
from retrieval.models import ApiKey, IdempotencyRecord
from retrieval.principals import api_key_create
from tests.retrieval.factories import api, build, publish, search, upload

pytestmark = pytest.mark.django_db

HANDBOOK = "/api/v1/kbs/handbook/documents/"


@pytest.fixture
def client(api_key: str) -> Client:
    return api(api_key)


def post_file(
    client: Client,
    idempotency_key: str | None,
    *,
    key: str = "policy",
    content: bytes = b"Travel policy: book economy class.",
    name: str = "policy.txt",
    path: str = HANDBOOK,
    **fields: Any,
) -> Any:
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
    return client.post(
        path,
        {"key": key, "file": SimpleUploadedFile(name, content), **fields},
        headers=headers,
    )


# --- listing --------------------------------------------------------------------------------


def page(client: Client, cursor: str | None = None, limit: int = 2) -> dict[str, Any]:
    query = f"?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
    response = client.get(HANDBOOK + query)
    assert response.status_code == 200, response.content
    return dict(response.json())


def test_pages_are_stable_while_documents_are_added(client: Client, kb: KnowledgeBase) -> None:
    for i in range(5):
        upload(kb, f"doc-{i}", f"text {i}")

    seen: list[str] = []
    first = page(client)
    seen += [d["key"] for d in first["results"]]
    upload(kb, "late-1", "added after the first page")
    cursor = first["next_cursor"]
    while cursor:
        current = page(client, cursor)
        seen += [d["key"] for d in current["results"]]
        if len(seen) == 4:
            upload(kb, "late-2", "added in the middle")
        cursor = current["next_cursor"]

    assert seen == [f"doc-{i}" for i in range(5)] + ["late-1", "late-2"]


def test_a_cursor_is_base64_of_the_last_id(client: Client, kb: KnowledgeBase) -> None:
    _, second, _ = (upload(kb, f"doc-{i}", "x").document for i in range(3))

    cursor = page(client, limit=2)["next_cursor"]

    assert base64.urlsafe_b64decode(cursor).decode() == str(second.pk)
    assert page(client, limit=5)["next_cursor"] is None


def test_listing_hides_deleted_documents_and_documents_of_other_groups(
    client: Client, kb: KnowledgeBase
) -> None:
    upload(kb, "open", "x")
    upload(kb, "payroll", "x", groups=("finance",))
    gone = upload(kb, "gone", "x").document
    Document.objects.filter(pk=gone.pk).update(deleted_at="2026-01-01T00:00Z")

    assert [d["key"] for d in page(client, limit=10)["results"]] == ["open"]


def test_a_page_costs_a_fixed_number_of_queries(
    client: Client, kb: KnowledgeBase, django_assert_max_num_queries: Any
) -> None:
    for i in range(3):
        publish(kb, f"doc-{i}", f"text {i}")

    with django_assert_max_num_queries(5):  # key, last used, key's KBs, KB, page
        results = page(client, limit=200)["results"]

    assert [d["live_revision"] for d in results] == [1, 1, 1]


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=201", "limit=many", "cursor=%21%21", "cursor=LTE%3D"]
)
def test_bad_paging_input_is_a_400(client: Client, kb: KnowledgeBase, query: str) -> None:
    response = client.get(f"{HANDBOOK}?{query}")

    assert response.status_code == 400
    assert response.json()["detail"]


# --- detail ---------------------------------------------------------------------------------


def test_detail_shows_the_live_revision_and_the_build_on_its_way(
    client: Client, kb: KnowledgeBase
) -> None:
    live = publish(kb, "policy", "Revision one.")
    upload(kb, "policy", "Revision two.")

    response = client.get(f"/api/v1/documents/{live.document_id}")

    assert response.status_code == 200
    body = response.json()
    assert body["key"] == "policy"
    assert body["live_revision"] == 1
    assert body["live_build_id"] == live.pk
    assert body["desired_revision"] == 2
    assert [(b["revision"], b["state"]) for b in body["running_builds"]] == [(2, "pending")]
    assert body["status"] == "live r1 · r2 queued"


def test_a_document_of_another_access_group_is_not_found(client: Client, kb: KnowledgeBase) -> None:
    secret = upload(kb, "payroll", "x", groups=("finance",)).document

    assert client.get(f"/api/v1/documents/{secret.pk}").status_code == 404
    assert client.delete(f"/api/v1/documents/{secret.pk}").status_code == 404


# --- uploads --------------------------------------------------------------------------------


def test_an_upload_creates_a_document_whose_build_goes_live(
    client: Client, kb: KnowledgeBase
) -> None:
    response = post_file(client, "u-1", title="Travel", access_groups="")

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["document_created"] is True
    assert body["revision"] == 1
    assert body["title"] == "Travel"
    revision = Revision.objects.get(document_id=body["document_id"])
    assert [b.pk for b in revision.builds.all()] == body["build_ids"]
    build(revision)
    hits = search(client, {"kb": "handbook", "query": "economy", "mode": "keyword"}).json()["hits"]
    assert [h["document_key"] for h in hits] == ["policy"]


def test_a_repeat_returns_the_first_answer_and_uploads_nothing(
    client: Client, kb: KnowledgeBase
) -> None:
    first = post_file(client, "u-1")

    again = post_file(client, "u-1")

    assert (again.status_code, again.json()) == (first.status_code, first.json())
    assert again.headers["Idempotent-Replayed"] == "true"
    assert Revision.objects.count() == 1


def test_the_same_key_with_another_body_is_a_409(client: Client, kb: KnowledgeBase) -> None:
    post_file(client, "u-1")

    response = post_file(client, "u-1", content=b"Travel policy: fly first class.")

    assert response.status_code == 409
    assert "Idempotency-Key" in response.json()["detail"]
    assert Revision.objects.count() == 1


def test_a_concurrent_repeat_that_commits_first_wins(
    client: Client, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    request_shas: list[str] = []
    real_sha, real_accept = uploads._request_sha256, uploads._accept

    def sha(**kwargs: Any) -> str:
        request_shas.append(real_sha(**kwargs))
        return request_shas[-1]

    def accept_while_the_first_request_commits(file: Any) -> Any:
        accepted = real_accept(file)
        IdempotencyRecord.objects.create(
            tenant=kb.tenant,
            principal=f"key:{ApiKey.objects.get().pk}",
            key="u-1",
            request_sha256=request_shas[-1],
            response_status=201,
            response_body={"first": True},
        )
        return accepted

    monkeypatch.setattr(uploads, "_request_sha256", sha)
    monkeypatch.setattr(uploads, "_accept", accept_while_the_first_request_commits)

    response = post_file(client, "u-1")

    assert (response.status_code, response.json()) == (201, {"first": True})
    assert not Revision.objects.exists(), "the second request wrote nothing"


def test_an_upload_for_an_existing_key_adds_a_revision(client: Client, kb: KnowledgeBase) -> None:
    post_file(client, "u-1")

    response = post_file(client, "u-2", content=b"Travel policy, revised.")

    assert response.status_code == 201
    assert response.json()["document_created"] is False
    assert response.json()["revision"] == 2
    assert Document.objects.get(key="policy").desired_revision == 2
    assert IdempotencyRecord.objects.count() == 2


def test_a_refused_upload_is_not_recorded_and_its_key_can_be_reused(
    client: Client, kb: KnowledgeBase
) -> None:
    assert post_file(client, "u-1", content=b"").status_code == 400

    assert post_file(client, "u-1").status_code == 201


@pytest.mark.parametrize(
    ("fields", "status", "words"),
    [
        ({"idempotency_key": None}, 400, "Idempotency-Key"),
        ({"idempotency_key": "x" * 256}, 400, "Idempotency-Key"),
        ({"idempotency_key": "é"}, 400, "Idempotency-Key"),
        ({"content": b""}, 400, "empty"),
        ({"name": "setup.exe"}, 415, "not supported"),
        ({"name": "report.pdf", "content": b"\x00\x01garbage"}, 415, "not a PDF"),
        ({"name": "notes", "content": b"plain"}, 415, "no extension"),
        ({"key": ""}, 400, "key"),
        ({"key": "k" * 256}, 400, "key"),
        ({"key": "nul\x00key"}, 400, "key"),
        ({"access_groups": "finance"}, 403, "access groups you hold"),
    ],
)
def test_bad_uploads_are_a_clear_4xx(
    client: Client, kb: KnowledgeBase, fields: dict[str, Any], status: int, words: str
) -> None:
    idempotency_key = fields.pop("idempotency_key", "u-1")

    response = post_file(client, idempotency_key, **fields)

    assert response.status_code == status, response.content
    assert words in str(response.json()["detail"])
    assert not Revision.objects.exists()


def test_a_file_over_the_size_limit_is_a_413(
    client: Client, kb: KnowledgeBase, settings: Any
) -> None:
    settings.UPLOAD_MAX_BYTES = 1000

    response = post_file(client, "u-1", content=b"a" * 5000)

    assert response.status_code == 413
    assert "limit" in response.json()["detail"]
    assert not Revision.objects.exists()


def test_a_json_body_is_a_415(client: Client, kb: KnowledgeBase) -> None:
    response = client.post(
        HANDBOOK, {"key": "k"}, content_type="application/json", headers={"Idempotency-Key": "a"}
    )

    assert response.status_code == 415


def test_two_files_in_one_upload_are_a_400(client: Client, kb: KnowledgeBase) -> None:
    response = client.post(
        HANDBOOK,
        {
            "key": "k",
            "file": [SimpleUploadedFile("a.txt", b"a"), SimpleUploadedFile("b.txt", b"b")],
        },
        headers={"Idempotency-Key": "two"},
    )

    assert response.status_code == 400
    assert not Revision.objects.exists()


def test_the_client_file_name_is_cleaned_and_never_a_path(
    client: Client, kb: KnowledgeBase
) -> None:
    response = post_file(client, "u-1", name="../../etc/\u202epasswd.txt")

    assert response.status_code == 201
    revision = Revision.objects.get()
    assert revision.original_name == "passwd.txt"
    assert revision.storage_path.startswith("sources/")


def test_a_revision_of_a_document_the_key_cannot_read_is_refused(
    client: Client, kb: KnowledgeBase
) -> None:
    upload(kb, "payroll", "x", groups=("finance",))

    response = post_file(client, "u-1", key="payroll")

    assert response.status_code == 409
    assert response.json()["error"] == "key_unavailable"
    assert "finance" not in response.content.decode()
    assert Document.objects.get(key="payroll").desired_revision == 1


def test_a_revision_of_a_deleted_document_is_a_409(client: Client, kb: KnowledgeBase) -> None:
    document = upload(kb, "policy", "x").document
    assert client.delete(f"/api/v1/documents/{document.pk}").status_code == 204

    response = post_file(client, "u-1")

    assert response.status_code == 409
    assert "deleted" in response.json()["detail"]


def _unwritable_answers(kb: KnowledgeBase, client: Client, key: str) -> list[Any]:
    """The answers to uploading `key` when it names, in turn: a live document of a group the
    caller lacks, a deleted one of that group, and a deleted one the caller could read. Each
    case is set up alone (the key exists once at a time) and asked with a new Idempotency-Key."""
    answers = []
    cases = [(("finance",), False), (("finance",), True), ((), True)]
    for i, (groups, deleted) in enumerate(cases):
        Document.objects.filter(kb=kb, key=key).update(key=f"retired-{i}")
        document = upload(kb, key, "Salaries are paid monthly.", groups=groups).document
        if deleted:
            Document.objects.filter(pk=document.pk).update(deleted_at="2026-01-01T00:00Z")
        answers.append(post_file(client, "same-request", key=key, content=b"Planted."))
        IdempotencyRecord.objects.all().delete()
    return answers


def test_a_key_the_caller_may_not_write_gets_one_answer_whatever_the_reason(
    client: Client, kb: KnowledgeBase
) -> None:
    """Item 3 of issue 14: status, headers and body are byte-identical whether the document
    that holds the key is restricted (live or deleted) or deleted; nothing names its groups,
    id or state. That the key is taken is all a writer learns (README, "Search API")."""
    answers = _unwritable_answers(kb, client, "payroll")

    first = answers[0]
    assert first.status_code == 409
    assert first.json() == {
        "error": "key_unavailable",
        "detail": "The key 'payroll' is taken by a document you cannot write (restricted to "
        "access groups you do not hold, or deleted and to be restored in the admin first). "
        "Use another key.",
    }
    for other in answers[1:]:
        assert other.status_code == first.status_code
        assert dict(other.headers) == dict(first.headers)
        assert other.content == first.content
    assert not any(b"finance" in a.content for a in answers)
    assert Revision.objects.filter(document__key="payroll").count() == 1, "nothing written"


def test_refusals_that_do_not_depend_on_the_key_come_first(kb: KnowledgeBase) -> None:
    """A caller that may not upload, or asks for a group it lacks, hears so whether or not the
    key is taken: no refusal tells a restricted key from a free one."""
    upload(kb, "payroll", "x", groups=("finance",))
    _, plain = api_key_create(tenant=kb.tenant, name="plain")

    for key in ("payroll", "free-key"):
        response = post_file(api(plain), f"u-{key}", key=key, access_groups="finance")
        assert response.status_code == 403, key
        assert response.json()["detail"] == (
            "You may only assign access groups you hold; not: finance."
        )


def test_a_key_with_groups_may_put_a_document_behind_them(kb: KnowledgeBase) -> None:
    _, finance = api_key_create(tenant=kb.tenant, name="finance", access_groups=["finance"])

    response = post_file(api(finance), "u-1", key="payroll", access_groups="finance")

    assert response.status_code == 201
    assert Document.objects.get(key="payroll").access_groups == ["finance"]


def test_only_a_holder_of_every_group_may_make_a_restricted_document_public(
    kb: KnowledgeBase,
) -> None:
    """Under the any-group rule, removing groups narrows who reads a document and clearing them
    widens it to the whole tenant; a key holding one of two groups may not do the latter."""
    _, finance = api_key_create(tenant=kb.tenant, name="finance", access_groups=["finance"])
    _, both = api_key_create(tenant=kb.tenant, name="both", access_groups=["finance", "hr"])
    assert post_file(api(both), "u-1", key="payroll", access_groups="finance,hr").status_code == 201

    refused = post_file(api(finance), "u-2", key="payroll", access_groups="")

    assert refused.status_code == 403
    assert refused.json()["detail"].endswith("you do not hold: hr.")
    assert Document.objects.get(key="payroll").access_groups == ["finance", "hr"]
    assert post_file(api(finance), "u-3", key="payroll").status_code == 201  # groups kept
    assert post_file(api(both), "u-4", key="payroll", access_groups="").status_code == 201
    assert Document.objects.get(key="payroll").access_groups == []


# --- deletes --------------------------------------------------------------------------------


def test_a_delete_hides_the_document_from_search_at_once(client: Client, kb: KnowledgeBase) -> None:
    live = publish(kb, "policy", "Travel policy: book economy class.")
    body = {"kb": "handbook", "query": "economy", "mode": "keyword"}
    assert search(client, body).json()["hits"]

    response = client.delete(f"/api/v1/documents/{live.document_id}")

    assert response.status_code == 204
    assert search(client, body).json()["hits"] == []
    detail = client.get(f"/api/v1/documents/{live.document_id}").json()
    assert (detail["deleted"], detail["live_revision"]) == (True, None)
    assert detail["status"] == "deleted · nothing served · r1 kept for restore"
    assert client.delete(f"/api/v1/documents/{live.document_id}").status_code == 204
    assert Build.objects.get(pk=live.pk).state == Build.State.LIVE, "kept for restore"


def test_a_session_user_needs_the_delete_permission(kb: KnowledgeBase) -> None:
    document = upload(kb, "policy", "x").document
    user = User.objects.create_user("viewer", password="a-long-test-password", is_staff=True)
    TenantMembership.objects.create(user=user, tenant=kb.tenant)
    client = Client(enforce_csrf_checks=False)
    client.force_login(user)

    response = client.delete(f"/api/v1/documents/{document.pk}")

    assert response.status_code == 403
    document.refresh_from_db()
    assert document.deleted_at is None


def test_idempotency_keys_are_honoured_for_the_retention_window_then_collected(
    client: Client, kb: KnowledgeBase, settings: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from retrieval.tasks import expire_idempotency_records

    settings.IDEMPOTENCY_RETENTION_HOURS = 24
    first = post_file(client, "old-key")
    assert post_file(client, "old-key").json() == first.json()  # replayed
    post_file(client, "new-key", content=b"Travel policy, revised.")
    IdempotencyRecord.objects.filter(key="old-key").update(
        created_at=timezone.now() - timedelta(hours=25)
    )

    expire_idempotency_records()  # the beat task, run in this process

    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["new-key"]
    again = post_file(client, "old-key", content=b"Travel policy, third.")
    assert again.status_code == 201 and again.json()["revision"] == 3  # a new upload now
