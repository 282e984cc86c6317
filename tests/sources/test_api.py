"""The sources' API (/api/v1/kbs/<kb>/sources, /api/v1/sources/...): create, read, change and
sync a source, page its runs and answer the deletions a run holds. Who may: a key with
`can_manage_sources` (403 naming it otherwise); a source of another tenant, or of a knowledge
base the key may not read, is a 404 exactly like one that does not exist. Credentials go in
and never come out, and without an encryption key they are refused (503) with nothing saved.
Bad input is a 400 naming the field, never a 500."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from ingestion.pipeline.run import task_execute
from kb.models import Document, KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from kb.services.metadata import metadata_field_save
from retrieval.api.serializers import cursor_encode
from retrieval.principals import api_key_create
from sources.models import Source, SourceItem, SyncRun
from sources.secrets import credentials_decrypt
from sources.services.sources import source_pause, source_save
from tests.sources.people import awaiting_run, content_manager, index_admin, synced_document
from work.models import IngestionTask

pytestmark = pytest.mark.django_db

API = "/api/v1"
SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY-9f3"  # no answer may ever carry it
KEY_ID = "AKIAIOSFODNN7EXAMPLE"
MANAGE = "can_manage_sources"
HUGE_IDS = (0, 2**63, 2**70)


class Api:
    """A client that sends `Authorization: Bearer <key>` and JSON, and keeps every answer so a
    test can check that none of them carried a secret."""

    def __init__(self, key: str) -> None:
        self.client = Client(
            headers={"Authorization": f"Bearer {key}"}, raise_request_exception=False
        )
        self.answers: list[Any] = []

    def _keep(self, response: Any) -> Any:
        self.answers.append(response)
        return response

    def get(self, path: str, **params: Any) -> Any:
        return self._keep(self.client.get(API + path, params))

    def post(self, path: str, body: Any = None) -> Any:
        data = b"" if body is None else json.dumps(body)
        return self._keep(self.client.post(API + path, data, content_type="application/json"))

    def patch(self, path: str, body: Any) -> Any:
        return self._keep(
            self.client.patch(API + path, json.dumps(body), content_type="application/json")
        )

    def raw(self, method: str, path: str, data: bytes, content_type: str) -> Any:
        return self._keep(self.client.generic(method, API + path, data, content_type=content_type))

    def everything_said(self) -> str:
        return "\n".join(
            f"{r.status_code} {dict(r.headers)} {r.content.decode(errors='replace')}"
            for r in self.answers
        )


def key_of(tenant: Tenant, **fields: Any) -> str:
    fields.setdefault("can_manage_sources", True)
    _, plaintext = api_key_create(tenant=tenant, name="sources", **fields)
    return plaintext


def error(response: Any, status: int, code: str | None = None) -> Any:
    """The error answer's `detail`, after checking its status, shape and code."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response.headers["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"error", "detail"}, body
    if code is not None:
        assert body["error"] == code, body
    return body["detail"]


def field_error(response: Any, field: str) -> str:
    """The 400's message for `field` (the answer names it)."""
    detail = error(response, 400, "invalid")
    assert isinstance(detail, dict) and field in detail, detail
    messages = detail[field]
    if isinstance(messages, list):
        return " ".join(str(message) for message in messages)
    return json.dumps(messages)  # nested: {key: [message]}


@pytest.fixture
def api(tenant: Tenant) -> Api:
    return Api(key_of(tenant))


@pytest.fixture
def share(tmp_path: Path) -> Path:
    root = tmp_path / "api-share"
    root.mkdir()
    return root


def folder_body(path: Path, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "Policies",
        "slug": "policies",
        "kind": "folder",
        "config": {"path": str(path)},
    }
    body.update(fields)
    return body


def s3_body(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "Bucket",
        "slug": "bucket",
        "kind": "s3",
        "config": {"bucket": "team-docs", "prefix": "handbook", "region": "eu-west-1"},
        "credentials": {"access_key_id": KEY_ID, "secret_access_key": SECRET},
    }
    body.update(fields)
    return body


def s3_source(kb: KnowledgeBase, **fields: Any) -> Source:
    values: dict[str, Any] = {
        "kb": kb,
        "name": "Bucket",
        "slug": "bucket",
        "kind": "s3",
        "config": {"bucket": "team-docs"},
    }
    values.update(fields)
    return source_save(**values)


def detail_url(source: Source) -> str:
    return f"/sources/{source.pk}"


def run_url(run: SyncRun) -> str:
    return f"/sources/{run.source_id}/runs/{run.pk}"


# --- create, list, read -----------------------------------------------------------------------


def test_a_folder_source_is_created_listed_and_read(
    kb: KnowledgeBase, api: Api, share: Path
) -> None:
    metadata_field_save(kb=kb, name="team", type="string")
    response = api.post(
        "/kbs/handbook/sources",
        folder_body(
            share,
            include=["docs/**/*.md"],
            exclude=["drafts/"],
            access_groups=[],
            metadata_map={"owner": "team"},
            sync_every_minutes=60,
            delete_threshold_percent=30,
        ),
    )

    assert response.status_code == 201, response.content
    created = response.json()
    source = Source.objects.get(kb=kb, slug="policies")
    assert created["id"] == source.pk
    assert created["kb"] == "handbook"
    assert created["kind"] == "folder"
    assert created["config"] == {"path": str(share)}
    assert created["has_credentials"] is False
    assert created["include"] == ["docs/**/*.md"] and created["exclude"] == ["drafts/"]
    assert created["metadata_map"] == {"owner": "team"}
    assert created["sync_every_minutes"] == 60 and created["delete_threshold_percent"] == 30
    assert created["enabled"] is True and created["last_run"] is None
    assert source.config == {"path": str(share)} and source.include == ["docs/**/*.md"]
    assert source.metadata_map == {"owner": "team"} and source.sync_every_minutes == 60

    # defaults, by id as well as by slug
    other = api.post(f"/kbs/{kb.pk}/sources", folder_body(share, name="Archive", slug="archive"))
    assert other.status_code == 201, other.content
    assert other.json()["delete_threshold_percent"] == 20
    assert other.json()["sync_every_minutes"] is None and other.json()["include"] == []

    listed = api.get("/kbs/handbook/sources")
    assert listed.status_code == 200
    assert [s["slug"] for s in listed.json()["results"]] == ["archive", "policies"]  # by name
    assert listed.json()["results"][1] == created

    read = api.get(detail_url(source))
    assert read.status_code == 200
    assert read.json() == created


def test_the_list_and_detail_show_the_latest_run(
    kb: KnowledgeBase, api: Api, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    quiet = folder_source(name="Quiet", slug="quiet", folder="quiet")
    older = SyncRun.objects.create(source=source, state=SyncRun.State.SUCCEEDED)
    newer = SyncRun.objects.create(source=source, state=SyncRun.State.FAILED, error="gone")

    listed = {s["slug"]: s for s in api.get("/kbs/handbook/sources").json()["results"]}

    assert listed["share"]["last_run"]["id"] == newer.pk != older.pk
    assert listed["share"]["last_run"]["state"] == "failed"
    assert listed["share"]["last_run"]["error"] == "gone"
    assert listed["quiet"]["last_run"] is None
    assert api.get(detail_url(source)).json()["last_run"] == listed["share"]["last_run"]
    assert api.get(detail_url(quiet)).json()["last_run"] is None


def test_a_duplicate_slug_is_a_400_on_slug(
    kb: KnowledgeBase, api: Api, share: Path, folder_source: Callable[..., Source]
) -> None:
    folder_source(slug="policies")

    response = api.post("/kbs/handbook/sources", folder_body(share))

    assert "already has a source 'policies'" in field_error(response, "slug")
    assert Source.objects.filter(kb=kb).count() == 1


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"kind": "ftp"}, "kind", "not a valid choice"),
        ({"kind": None}, "kind", "may not be null"),
        ({"name": ""}, "name", "may not be blank"),
        ({"slug": "not a slug"}, "slug", "slug"),
        ({"config": "path"}, "config", "dictionary"),
        ({"config": {"path": "/usr"}}, "config", "not under a folder opened to sources"),
        ({"config": {"path": "relative/path"}}, "config", "not an absolute path"),
        ({"config": {"path": "/no/such/folder"}}, "config", "does not exist"),
        ({"config": {"path": None}}, "config", "needs 'path'"),
        ({"config": {"bucket": "x"}}, "config", "no setting 'bucket'"),
        ({"config": {"path": 7}}, "config", "not an absolute path"),
        ({"include": ["docs/\\"]}, "include", "docs/\\"),
        ({"include": "*.md"}, "include", "list"),
        ({"include": ["*"] * 201}, "include", "200"),
        ({"metadata_map": {"owner": "nobody"}}, "metadata_map", "not a metadata field"),
        ({"metadata_map": {"owner": "title"}}, "metadata_map", "not a metadata field"),
        ({"sync_every_minutes": 0}, "sync_every_minutes", "greater than or equal to 1"),
        ({"delete_threshold_percent": 101}, "delete_threshold_percent", "less than or equal"),
        ({"enabled": "perhaps"}, "enabled", "boolean"),
        ({"credentials": {"token": "x"}}, "credentials", "take no 'token'"),
        ({"credentials": ["x"]}, "credentials", "dictionary"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    kb: KnowledgeBase, api: Api, share: Path, change: dict[str, Any], field: str, says: str
) -> None:
    response = api.post("/kbs/handbook/sources", folder_body(share, **change))

    assert says in field_error(response, field)
    assert not Source.objects.exists()


def test_a_missing_field_is_a_400_naming_it(kb: KnowledgeBase, api: Api, share: Path) -> None:
    body = folder_body(share)
    for field in ("name", "slug", "kind", "config"):
        missing = {k: v for k, v in body.items() if k != field}
        assert "required" in field_error(api.post("/kbs/handbook/sources", missing), field)
    assert not Source.objects.exists()


def test_an_oversized_config_is_a_400(kb: KnowledgeBase, api: Api, share: Path) -> None:
    config = {"path": str(share), "note": "x" * 17_000}

    response = api.post("/kbs/handbook/sources", folder_body(share, config=config))

    assert "longer than 16384 characters" in field_error(response, "config")
    assert not Source.objects.exists()


def test_a_bad_exclude_pattern_is_a_400(kb: KnowledgeBase, api: Api, share: Path) -> None:
    response = api.post("/kbs/handbook/sources", folder_body(share, exclude=["!"]))

    assert "'!' is not valid" in field_error(response, "exclude")
    assert not Source.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        b'{"name": "Policies", ',
        b'{"name": "Policies",}',
        b"\xff\xfe{}",
        b"[]",
        b"null",
        b'"a source"',
        b"42",
        b"{}" * 2,
    ],
    ids=["cut", "trailing-comma", "not-utf8", "list", "null", "string", "number", "two"],
)
@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_a_malformed_body_is_a_400_never_a_500(
    api: Api, folder_source: Callable[..., Source], body: bytes, method: str
) -> None:
    source = folder_source()
    path = "/kbs/handbook/sources" if method == "POST" else detail_url(source)

    response = api.raw(method, path, body, "application/json")

    error(response, 400)
    assert Source.objects.count() == 1
    source.refresh_from_db()
    assert source.name == "Share"


def test_an_empty_body_creates_nothing_and_changes_nothing(
    api: Api, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    before = Source.objects.values().get(pk=source.pk)

    created = api.raw("POST", "/kbs/handbook/sources", b"", "application/json")
    changed = api.raw("PATCH", detail_url(source), b"", "application/json")

    assert "required" in field_error(created, "name")
    assert changed.status_code == 200 and changed.json()["name"] == "Share"
    after = Source.objects.values().get(pk=source.pk)
    assert {k: v for k, v in after.items() if k != "updated_at"} == {
        k: v for k, v in before.items() if k != "updated_at"
    }
    assert Source.objects.count() == 1


@pytest.mark.parametrize("method", ["POST", "PATCH"])
@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"]
)
def test_a_body_that_is_not_json_is_a_415(
    api: Api, folder_source: Callable[..., Source], share: Path, method: str, content_type: str
) -> None:
    source = folder_source()
    path = "/kbs/handbook/sources" if method == "POST" else detail_url(source)

    response = api.raw(method, path, json.dumps(folder_body(share)).encode(), content_type)

    error(response, 415, "unsupported_media_type")
    assert Source.objects.count() == 1


# --- change -----------------------------------------------------------------------------------


def test_a_change_touches_only_the_fields_given(
    api: Api, folder_source: Callable[..., Source], tmp_path: Path
) -> None:
    source = folder_source(include=["*.md"], sync_every_minutes=30, access_groups=[])
    moved = tmp_path / "moved"
    moved.mkdir()

    response = api.patch(detail_url(source), {"name": "Renamed", "config": {"path": str(moved)}})

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["name"] == "Renamed" and body["config"] == {"path": str(moved)}
    assert body["include"] == ["*.md"] and body["sync_every_minutes"] == 30
    source.refresh_from_db()
    assert source.name == "Renamed" and source.config == {"path": str(moved)}
    assert source.include == ["*.md"] and source.sync_every_minutes == 30

    # null clears the schedule; `enabled` pauses
    response = api.patch(detail_url(source), {"sync_every_minutes": None, "enabled": False})
    assert response.status_code == 200, response.content
    source.refresh_from_db()
    assert source.sync_every_minutes is None and not source.enabled
    assert response.json()["sync_every_minutes"] is None and response.json()["enabled"] is False


def test_a_change_of_config_is_merged_and_null_removes_a_key(kb: KnowledgeBase, api: Api) -> None:
    source = s3_source(kb, config={"bucket": "team-docs", "prefix": "handbook", "region": "eu-1"})

    response = api.patch(detail_url(source), {"config": {"region": None, "prefix": "manuals"}})

    assert response.status_code == 200, response.content
    assert response.json()["config"] == {"bucket": "team-docs", "prefix": "manuals/"}
    source.refresh_from_db()
    assert source.config == {"bucket": "team-docs", "prefix": "manuals/"}

    # removing a required setting is refused, and nothing changes
    response = api.patch(detail_url(source), {"config": {"bucket": None}})
    assert "needs 'bucket'" in field_error(response, "config")
    source.refresh_from_db()
    assert source.config == {"bucket": "team-docs", "prefix": "manuals/"}


def test_the_kind_cannot_change(api: Api, folder_source: Callable[..., Source]) -> None:
    source = folder_source()

    for kind in ("s3", "website", "git"):
        response = api.patch(detail_url(source), {"kind": kind})
        assert "kind cannot change" in field_error(response, "kind")
    assert api.patch(detail_url(source), {"kind": "folder"}).status_code == 200

    source.refresh_from_db()
    assert source.kind == "folder"


def test_the_slug_changes_until_the_source_has_documents(
    kb: KnowledgeBase, api: Api, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    folder_source(slug="taken", name="Taken", folder="taken")

    assert api.patch(detail_url(source), {"slug": "policies"}).status_code == 200
    assert "already has a source" in field_error(
        api.patch(detail_url(source), {"slug": "taken"}), "slug"
    )
    source.refresh_from_db()
    assert source.slug == "policies"
    synced_document(source, "guide.txt", "How to deploy.")

    response = api.patch(detail_url(source), {"slug": "renamed"})

    assert "cannot change once the source has documents" in field_error(response, "slug")
    source.refresh_from_db()
    assert source.slug == "policies"
    assert Document.objects.get(kb=kb).key == "policies/guide.txt"
    # other fields still change
    assert api.patch(detail_url(source), {"name": "Still here"}).status_code == 200


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"config": {"path": "/usr"}}, "config"),
        ({"config": {"surprise": 1}}, "config"),
        ({"config": {"x": "y" * 17_000}}, "config"),
        ({"include": ["a\\"]}, "include"),
        ({"delete_threshold_percent": 0}, "delete_threshold_percent"),
        ({"name": "x" * 201}, "name"),
        ({"config": None}, "config"),
    ],
)
def test_a_bad_change_is_a_400_and_changes_nothing(
    api: Api, folder_source: Callable[..., Source], change: dict[str, Any], field: str
) -> None:
    source = folder_source()
    before = Source.objects.values().get(pk=source.pk)

    field_error(api.patch(detail_url(source), change), field)

    assert Source.objects.values().get(pk=source.pk) == before


# --- credentials ------------------------------------------------------------------------------


def test_credentials_are_stored_encrypted_and_never_returned(kb: KnowledgeBase, api: Api) -> None:
    created = api.post("/kbs/handbook/sources", s3_body())

    assert created.status_code == 201, created.content
    assert created.json()["has_credentials"] is True
    assert "credentials" not in created.json()
    source = Source.objects.get(kb=kb, slug="bucket")
    assert source.credentials_encrypted
    assert SECRET not in source.credentials_encrypted and KEY_ID not in source.credentials_encrypted
    assert credentials_decrypt(source.credentials_encrypted) == {
        "access_key_id": KEY_ID,
        "secret_access_key": SECRET,
    }

    # replaced key by key; an empty string keeps the stored one
    changed = api.patch(
        detail_url(source),
        {"credentials": {"access_key_id": "AKIANEWKEY", "secret_access_key": ""}},
    )
    assert changed.status_code == 200, changed.content
    assert changed.json()["has_credentials"] is True
    source.refresh_from_db()
    assert credentials_decrypt(source.credentials_encrypted) == {
        "access_key_id": "AKIANEWKEY",
        "secret_access_key": SECRET,
    }
    # a change without credentials keeps them
    assert api.patch(detail_url(source), {"name": "Renamed"}).status_code == 200
    source.refresh_from_db()
    assert credentials_decrypt(source.credentials_encrypted)["secret_access_key"] == SECRET

    # every read, and the errors that had them in their request
    api.get(detail_url(source))
    api.get("/kbs/handbook/sources")
    api.post(f"{detail_url(source)}/sync")
    api.get(f"{detail_url(source)}/runs")
    field_error(api.post("/kbs/handbook/sources", s3_body()), "slug")
    field_error(api.post("/kbs/handbook/sources", s3_body(slug="b2", kind="git")), "config")
    field_error(
        api.post("/kbs/handbook/sources", s3_body(slug="b3", config={"bucket": "No Such"})),
        "config",
    )
    field_error(
        api.post(
            "/kbs/handbook/sources",
            s3_body(slug="b4", credentials={"secret_access_key": SECRET + "x" * 4096}),
        ),
        "credentials",
    )
    field_error(
        api.post("/kbs/handbook/sources", s3_body(slug="b5", credentials={"k": [SECRET]})),
        "credentials",
    )
    field_error(api.patch(detail_url(source), {**s3_body(), "kind": "folder"}), "kind")
    error(
        api.raw("POST", "/kbs/handbook/sources", json.dumps(s3_body()).encode(), "text/plain"), 415
    )
    error(
        api.raw("PATCH", detail_url(source), f'{{"x": "{SECRET}'.encode(), "application/json"), 400
    )
    outsider = Api(key_of(kb.tenant, can_manage_sources=False))
    error(outsider.patch(detail_url(source), s3_body()), 403)
    error(outsider.post("/kbs/handbook/sources", s3_body(slug="b6")), 403)

    said = api.everything_said() + outsider.everything_said()
    assert SECRET not in said and KEY_ID not in said and "AKIANEWKEY" not in said
    assert Source.objects.filter(kb=kb).count() == 1


def test_without_an_encryption_key_credentials_are_a_503_and_nothing_is_saved(
    kb: KnowledgeBase, api: Api, settings: Any
) -> None:
    existing = s3_source(kb, slug="existing")
    before = Source.objects.values().get(pk=existing.pk)
    settings.SOURCES_KEY = ""

    response = api.post("/kbs/handbook/sources", s3_body())

    assert "CANON_SOURCES_KEY" in error(response, 503, "unavailable")
    assert not Source.objects.filter(slug="bucket").exists()

    changed = api.patch(detail_url(existing), {"name": "Renamed", "credentials": {"k": "v"}})
    error(changed, 400)  # the kind's fields are checked first: no 'k'
    changed = api.patch(
        detail_url(existing), {"name": "Renamed", "credentials": {"access_key_id": KEY_ID}}
    )
    error(changed, 503, "unavailable")
    assert Source.objects.values().get(pk=existing.pk) == before

    # a source without credentials needs no key
    plain = api.post("/kbs/handbook/sources", s3_body(slug="open", credentials=None))
    error(plain, 400)  # null is not a mapping
    body = {k: v for k, v in s3_body(slug="open").items() if k != "credentials"}
    response = api.post("/kbs/handbook/sources", body)
    assert response.status_code == 201, response.content
    assert response.json()["has_credentials"] is False
    assert SECRET not in api.everything_said() and KEY_ID not in api.everything_said()


# --- who may ----------------------------------------------------------------------------------


@pytest.fixture
def endpoints(
    kb: KnowledgeBase, folder_source: Callable[..., Source], share: Path
) -> Callable[[Api], list[tuple[str, Any]]]:
    """Every endpoint, called by a given client on a source and a run of `kb`."""
    source = folder_source()
    synced_document(source, "old.txt", "old words")
    run = awaiting_run(source, ["old.txt"])

    def call_all(client: Api) -> list[tuple[str, Any]]:
        return [
            ("list", client.get("/kbs/handbook/sources")),
            ("create", client.post("/kbs/handbook/sources", folder_body(share))),
            ("read", client.get(detail_url(source))),
            ("change", client.patch(detail_url(source), {"name": "Changed"})),
            ("sync", client.post(f"{detail_url(source)}/sync")),
            ("runs", client.get(f"{detail_url(source)}/runs")),
            ("run", client.get(run_url(run))),
            ("confirm", client.post(f"{run_url(run)}/confirm")),
            ("keep", client.post(f"{run_url(run)}/keep")),
        ]

    return call_all


def assert_untouched(kb: KnowledgeBase) -> None:
    source = Source.objects.get(kb=kb)
    assert source.name == "Share"
    run = SyncRun.objects.get(source=source)
    assert run.state == SyncRun.State.AWAITING_CONFIRMATION
    assert SourceItem.objects.filter(pending_delete_run=run).count() == 1
    assert not Document.objects.filter(kb=kb, deleted_at__isnull=False).exists()


def test_a_key_that_may_not_manage_sources_gets_a_403_naming_the_permission_everywhere(
    kb: KnowledgeBase, endpoints: Callable[[Api], list[tuple[str, Any]]]
) -> None:
    reader = Api(key_of(kb.tenant, can_manage_sources=False))

    for name, response in endpoints(reader):
        assert MANAGE in error(response, 403, "permission_denied"), name

    assert_untouched(kb)


def test_another_tenants_key_gets_the_404_a_missing_id_gets(
    kb: KnowledgeBase, endpoints: Callable[[Api], list[tuple[str, Any]]]
) -> None:
    other = Tenant.objects.create(name="Rival", slug="rival")
    knowledge_base_create(tenant=other, name="Handbook", slug="handbook-of-rival")
    stranger = Api(key_of(other))

    answers = endpoints(stranger)

    source = Source.objects.get(kb=kb)
    run = SyncRun.objects.get(source=source)
    missing_source, missing_run = source.pk + 1000, run.pk + 1000
    for name, response in answers:
        assert response.status_code == 404, (name, response.content)
    # the same bodies as for ids that do not exist, with the missing ids in them
    missing = Api(key_of(kb.tenant))
    for (name, foreign), path in zip(
        answers,
        [
            "/kbs/nothing-here/sources",
            "/kbs/nothing-here/sources",
            f"/sources/{missing_source}",
            f"/sources/{missing_source}",
            f"/sources/{missing_source}/sync",
            f"/sources/{missing_source}/runs",
            f"/sources/{missing_source}/runs/{missing_run}",
            f"/sources/{missing_source}/runs/{missing_run}/confirm",
            f"/sources/{missing_source}/runs/{missing_run}/keep",
        ],
        strict=True,
    ):
        method = foreign.request["REQUEST_METHOD"]
        absent = missing.raw(method, path, b"{}", "application/json")
        normalised = foreign.content.decode().replace(f"'{kb.slug}'", "'nothing-here'")
        normalised = normalised.replace(f"Source {source.pk} ", f"Source {missing_source} ")
        assert normalised == absent.content.decode(), name
        assert foreign.headers["Content-Type"] == absent.headers["Content-Type"]
    assert error(answers[2][1], 404, "not_found") == f"Source {source.pk} not found."
    assert_untouched(kb)


def test_another_tenants_knowledge_base_by_id_is_a_404(kb: KnowledgeBase) -> None:
    other = Tenant.objects.create(name="Rival", slug="rival")
    theirs = knowledge_base_create(tenant=other, name="Theirs", slug="theirs")
    client = Api(key_of(kb.tenant))

    for ref in (str(theirs.pk), "theirs"):
        detail = error(client.get(f"/kbs/{ref}/sources"), 404, "not_found")
        assert detail == f"Knowledge base {ref!r} not found."
        error(client.post(f"/kbs/{ref}/sources", {"name": "x"}), 404, "not_found")
    assert not Source.objects.exists()


def test_a_key_limited_to_another_knowledge_base_gets_a_404(
    kb: KnowledgeBase, endpoints: Callable[[Api], list[tuple[str, Any]]]
) -> None:
    elsewhere = knowledge_base_create(tenant=kb.tenant, name="Wiki", slug="wiki")
    limited = Api(key_of(kb.tenant, knowledge_bases=[elsewhere]))

    for name, response in endpoints(limited):
        assert response.status_code == 404, (name, response.content)

    assert_untouched(kb)
    # the knowledge base it may read works
    assert limited.get("/kbs/wiki/sources").json() == {"results": []}


def test_without_a_key_it_is_a_401(kb: KnowledgeBase, folder_source: Callable[..., Source]) -> None:
    source = folder_source()
    client = Client(raise_request_exception=False)

    assert client.get(f"{API}/kbs/handbook/sources").status_code == 401
    assert client.post(f"{API}/sources/{source.pk}/sync").status_code == 401
    wrong = Client(headers={"Authorization": "Bearer canon_nope_nope"})
    assert wrong.get(f"{API}/sources/{source.pk}").status_code == 401
    assert not SyncRun.objects.exists()


def test_access_groups_the_key_does_not_hold_are_a_403(
    kb: KnowledgeBase, share: Path, folder_source: Callable[..., Source]
) -> None:
    staff = Api(key_of(kb.tenant, access_groups=["staff"]))

    refused = staff.post("/kbs/handbook/sources", folder_body(share, access_groups=["finance"]))
    assert "not: finance" in error(refused, 403, "permission_denied")
    assert not Source.objects.exists()

    created = staff.post(
        "/kbs/handbook/sources", folder_body(share, access_groups=[" staff ", "staff"])
    )
    assert created.status_code == 201, created.content
    assert created.json()["access_groups"] == ["staff"]

    restricted = folder_source(
        slug="finance", name="Finance", folder="fin", access_groups=["finance"]
    )
    # groups it does not hold stay (kept) only beside one it holds
    alone = staff.patch(detail_url(restricted), {"access_groups": ["finance"]})
    assert "Keep a group you hold" in error(alone, 403, "permission_denied")
    cleared = staff.patch(detail_url(restricted), {"access_groups": []})
    assert "you do not hold: finance" in error(cleared, 403, "permission_denied")
    restricted.refresh_from_db()
    assert restricted.access_groups == ["finance"]

    widened = staff.patch(detail_url(restricted), {"access_groups": ["finance", "staff"]})
    assert widened.status_code == 200, widened.content
    restricted.refresh_from_db()
    assert restricted.access_groups == ["finance", "staff"]
    # other changes do not need the groups
    assert staff.patch(detail_url(restricted), {"name": "Money"}).status_code == 200


def test_a_session_user_needs_the_change_permission(
    tenant: Tenant, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()

    admin = index_admin(tenant)
    assert admin.get(f"{API}/sources/{source.pk}").status_code == 200
    response = admin.post(f"{API}/sources/{source.pk}/sync")
    assert response.status_code == 202, response.content

    manager = content_manager(tenant)
    response = manager.get(f"{API}/sources/{source.pk}")
    assert response.status_code == 403 and "sources.change_source" in response.json()["detail"]


# --- sync and runs ----------------------------------------------------------------------------


def test_sync_starts_a_run_once_and_a_paused_source_is_a_409(
    api: Api, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()

    started = api.post(f"{detail_url(source)}/sync")

    assert started.status_code == 202, started.content
    run = SyncRun.objects.get(source=source)
    assert started.json()["id"] == run.pk and started.json()["source"] == source.pk
    assert started.json()["state"] == "queued" and started.json()["trigger"] == "api"
    assert run.trigger == SyncRun.Trigger.API and run.task_id is not None

    again = api.post(f"{detail_url(source)}/sync")
    assert again.status_code == 200
    assert again.json()["id"] == run.pk
    assert SyncRun.objects.filter(source=source).count() == 1
    assert api.get(detail_url(source)).json()["last_run"]["id"] == run.pk

    paused = source_pause(
        source=folder_source(slug="paused", name="Paused", folder="paused"), paused=True
    )
    refused = api.post(f"{detail_url(paused)}/sync")
    assert "paused" in error(refused, 409, "conflict")
    assert not SyncRun.objects.filter(source=paused).exists()


def test_runs_come_newest_first_a_page_at_a_time(
    api: Api, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    other = folder_source(slug="other", name="Other", folder="other")
    runs = [SyncRun.objects.create(source=source, state=SyncRun.State.SUCCEEDED) for _ in range(5)]
    SyncRun.objects.create(source=other, state=SyncRun.State.SUCCEEDED)

    seen: list[int] = []
    cursor: str | None = None
    pages = 0
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.get(f"{detail_url(source)}/runs", **params)
        assert page.status_code == 200, page.content
        body = page.json()
        assert len(body["results"]) <= 2
        assert all(r["source"] == source.pk for r in body["results"])
        seen += [r["id"] for r in body["results"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break

    assert seen == [run.pk for run in reversed(runs)]
    assert pages == 3
    everything = api.get(f"{detail_url(source)}/runs").json()
    assert [r["id"] for r in everything["results"]] == seen and everything["next_cursor"] is None
    assert "cursor" in field_error(api.get(f"{detail_url(source)}/runs", cursor="!!"), "cursor")
    field_error(api.get(f"{detail_url(source)}/runs", limit=0), "limit")
    field_error(api.get(f"{detail_url(source)}/runs", limit="many"), "limit")


def test_a_sync_run_to_its_end_reports_its_counts_and_problems(
    kb: KnowledgeBase, api: Api, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    root = Path(source.config["path"])
    (root / "guide.txt").write_text("How to deploy.")
    (root / "faq.md").write_text("# FAQ\n\nInvoices go out monthly.\n")
    (root / "empty.txt").write_bytes(b"")
    (root / "backup.zip").write_bytes(b"PK\x03\x04 a kind Canon does not read")

    started = api.post(f"{detail_url(source)}/sync")
    assert started.status_code == 202, started.content
    run = SyncRun.objects.get(pk=started.json()["id"])
    assert run.task_id is not None
    # the test's transaction holds the database clock at its start, before the task's time
    IngestionTask.objects.filter(pk=run.task_id).update(available_at=None)
    task_execute(task_id=run.task_id, worker_id="test")

    response = api.get(run_url(run))

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["id"] == run.pk and body["source"] == source.pk
    assert body["state"] == "succeeded", body["error"]
    assert body["percent"] == 100 and body["listing_complete"] is True
    assert body["counts"] == {
        "new": 2,
        "changed": 0,
        "unchanged": 0,
        "restored": 0,
        "deleted": 0,
        "failed": 1,
        "skipped": 0,
        "unsupported": 1,
    }
    assert body["listed"] == 4
    assert body["finished_at"] is not None and body["error"] == ""
    assert body["pending_deletions"] == 0
    reasons = {(p["path"], p["outcome"]): p["reason"] for p in body["problems"]}
    assert set(reasons) == {("empty.txt", "failed"), ("backup.zip", "unsupported")}
    assert "empty" in reasons["empty.txt", "failed"]
    assert reasons["backup.zip", "unsupported"] == "skipped: not a supported kind of file"
    assert set(Document.objects.filter(kb=kb).values_list("key", flat=True)) == {
        "share/guide.txt",
        "share/faq.md",
    }
    # the list shows it as the latest, and a new sync starts a second run
    assert api.get(detail_url(source)).json()["last_run"]["state"] == "succeeded"
    second = api.post(f"{detail_url(source)}/sync")
    assert second.status_code == 202 and second.json()["id"] != run.pk


def test_a_run_of_another_source_is_a_404(api: Api, folder_source: Callable[..., Source]) -> None:
    source = folder_source()
    other = folder_source(slug="other", name="Other", folder="other")
    synced_document(other, "a.txt", "alpha")
    theirs = awaiting_run(other, ["a.txt"])

    for suffix in ("", "/confirm", "/keep"):
        path = f"/sources/{source.pk}/runs/{theirs.pk}{suffix}"
        response = api.post(path) if suffix else api.get(path)
        assert (
            error(response, 404, "not_found") == f"Run {theirs.pk} of source {source.pk} not found."
        )
    theirs.refresh_from_db()
    assert theirs.state == SyncRun.State.AWAITING_CONFIRMATION


# --- held deletions ---------------------------------------------------------------------------


def test_confirm_deletes_the_held_documents_and_a_second_confirm_is_a_409(
    kb: KnowledgeBase, api: Api, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    for path in ("a.txt", "b.txt", "c.txt"):
        synced_document(source, path, f"text of {path}")
    run = awaiting_run(source, ["a.txt", "b.txt"])
    held = api.get(run_url(run)).json()
    assert held["state"] == "awaiting_confirmation"
    assert held["pending_deletions"] == 2 and held["deletions_planned"] == 2

    response = api.post(f"{run_url(run)}/confirm")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["documents"] == 2
    assert body["id"] == run.pk and body["state"] == "succeeded"
    assert body["counts"]["deleted"] == 2 and body["pending_deletions"] == 0
    assert "Confirmed: 2 deleted." in body["deletion_note"]
    deleted = Document.objects.filter(kb=kb, deleted_at__isnull=False)
    assert set(deleted.values_list("key", flat=True)) == {"share/a.txt", "share/b.txt"}
    assert Document.objects.filter(kb=kb).count() == 3  # soft: restorable
    assert Document.objects.get(key="share/c.txt").deleted_at is None
    run.refresh_from_db()
    assert run.state == SyncRun.State.SUCCEEDED and run.confirmed_at is not None

    again = api.post(f"{run_url(run)}/confirm")
    assert "holds no deletions" in error(again, 409, "conflict")
    error(api.post(f"{run_url(run)}/keep"), 409, "conflict")
    assert deleted.count() == 2


def test_keep_closes_the_run_and_deletes_nothing(
    kb: KnowledgeBase, api: Api, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    for path in ("a.txt", "b.txt"):
        synced_document(source, path, f"text of {path}")
    run = awaiting_run(source, ["a.txt", "b.txt"])

    response = api.post(f"{run_url(run)}/keep")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["documents"] == 2 and body["state"] == "succeeded"
    assert body["pending_deletions"] == 0 and body["counts"]["deleted"] == 0
    assert not Document.objects.filter(kb=kb, deleted_at__isnull=False).exists()
    assert not SourceItem.objects.filter(pending_delete_run__isnull=False).exists()
    run.refresh_from_db()
    assert run.state == SyncRun.State.SUCCEEDED

    error(api.post(f"{run_url(run)}/keep"), 409, "conflict")
    error(api.post(f"{run_url(run)}/confirm"), 409, "conflict")
    assert not Document.objects.filter(kb=kb, deleted_at__isnull=False).exists()


def test_a_run_that_holds_nothing_cannot_be_confirmed(
    api: Api, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    started = api.post(f"{detail_url(source)}/sync").json()

    for answer in ("confirm", "keep"):
        response = api.post(f"/sources/{source.pk}/runs/{started['id']}/{answer}")
        assert "holds no deletions (it is Queued)" in error(response, 409, "conflict")


# --- ids --------------------------------------------------------------------------------------


@pytest.mark.parametrize("huge", HUGE_IDS)
def test_zero_and_huge_ids_are_a_404_not_a_500(
    api: Api, folder_source: Callable[..., Source], huge: int
) -> None:
    source = folder_source()
    run = SyncRun.objects.create(source=source, state=SyncRun.State.SUCCEEDED)

    answers = [
        api.get(f"/sources/{huge}"),
        api.patch(f"/sources/{huge}", {"name": "x"}),
        api.post(f"/sources/{huge}/sync"),
        api.get(f"/sources/{huge}/runs"),
        api.get(f"/sources/{huge}/runs/{run.pk}"),
        api.post(f"/sources/{huge}/runs/{run.pk}/confirm"),
        api.get(f"/sources/{source.pk}/runs/{huge}"),
        api.post(f"/sources/{source.pk}/runs/{huge}/confirm"),
        api.post(f"/sources/{source.pk}/runs/{huge}/keep"),
        api.get(f"/kbs/{huge}/sources"),
        api.post(f"/kbs/{huge}/sources", {"name": "x"}),
    ]

    for response in answers:
        error(response, 404, "not_found")
    assert SyncRun.objects.count() == 1
    too_far = cursor_encode(2**63)
    field_error(api.get(f"/sources/{source.pk}/runs", cursor=too_far), "cursor")


def test_a_path_that_is_not_an_id_is_a_404(api: Api) -> None:
    for path in ("/sources/-1", "/sources/abc", "/sources/1/runs/x", "/sources/1/"):
        error(api.get(path), 404, "not_found")
