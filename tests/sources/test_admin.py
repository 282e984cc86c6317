"""Sources in the admin: the form (the kind's settings as inputs, credentials never shown, every
refusal of `source_save` on its field), Sync now, pause and resume behind confirmation pages,
the run page and its progress JSON, the answer to held deletions, the knowledge base's home and
the document page, and who may do what: content managers look, index admins act, another
tenant's staff get the answer a missing id gets."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client

from kb.models import Document, KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from kb.services.metadata import metadata_field_save
from sources.models import Source, SourceItem, SyncRun
from sources.secrets import credentials_decrypt
from sources.services.sources import source_pause
from tests.sources.people import (
    awaiting_run,
    content_manager,
    index_admin,
    synced_document,
)

pytestmark = pytest.mark.django_db

ADD = "/admin/sources/source/add/"
SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY-9f3"  # the credential no page may show


def change_url(source: Source) -> str:
    return f"/admin/sources/source/{source.pk}/change/"


def run_url(run: SyncRun) -> str:
    return f"/admin/sources/syncrun/{run.pk}/change/"


def folder_form(kb: KnowledgeBase, path: Path, **fields: Any) -> dict[str, Any]:
    """The add form as a browser posts it for a folder source (every kind's inputs exist on
    the page; the other kinds' are left empty)."""
    data = {
        "kb": str(kb.pk),
        "kind": "folder",
        "name": "Policies share",
        "slug": "policies",
        "enabled": "on",
        "config__folder__path": str(path),
        "include": "",
        "exclude": "",
        "access_groups": "",
        "metadata_map": "",
        "sync_every_minutes": "",
        "delete_threshold_percent": "20",
    }
    data.update(fields)
    return data


def change_form(source: Source, **fields: Any) -> dict[str, Any]:
    """The change form of `source` as its page shows it."""
    data: dict[str, Any] = {
        "name": source.name,
        "slug": source.slug,
        "include": "\n".join(source.include),
        "exclude": "\n".join(source.exclude),
        "access_groups": ",".join(source.access_groups),
        "metadata_map": "\n".join(f"{k} = {v}" for k, v in source.metadata_map.items()),
        "sync_every_minutes": source.sync_every_minutes or "",
        "delete_threshold_percent": source.delete_threshold_percent,
    }
    if source.enabled:
        data["enabled"] = "on"
    for key, value in source.config.items():
        data[f"config__{source.kind}__{key}"] = value
    data.update(fields)
    return data


def errors_of(response: Any) -> dict[str, list[str]]:
    assert response.status_code == 200, response.status_code
    form = response.context["adminform"].form
    return {name: [str(e) for e in errors] for name, errors in form.errors.items()}


@pytest.fixture
def share(tmp_path: Path) -> Path:
    root = tmp_path / "share"
    root.mkdir()
    (root / "guide.md").write_text("# Guide\n")
    return root


@pytest.fixture
def ian(tenant: Tenant) -> Client:
    return index_admin(tenant)


@pytest.fixture
def carol(tenant: Tenant) -> Client:
    return content_manager(tenant)


# --- the form ---------------------------------------------------------------------------------


def test_an_index_admin_adds_a_folder_source_through_the_form(
    kb: KnowledgeBase, share: Path, ian: Client
) -> None:
    page = ian.get(ADD)
    html = page.content.decode()
    assert page.status_code == 200
    # every kind's settings are inputs of their own, credentials password inputs
    for name in (
        "config__folder__path",
        "config__s3__bucket",
        "config__website__start_url",
        "config__git__url",
    ):
        assert f'name="{name}"' in html, name
    assert re.search(r'<input type="password" name="credential__s3__secret_access_key"', html)

    response = ian.post(
        ADD,
        folder_form(
            kb, share, include="docs/**/*.md\n*.pdf", exclude="drafts/", sync_every_minutes="60"
        ),
    )

    assert response.status_code == 302, errors_of(response)
    source = Source.objects.get()
    assert (source.kb, source.kind, source.name, source.slug) == (
        kb,
        "folder",
        "Policies share",
        "policies",
    )
    assert source.config == {"path": str(share)}
    assert source.include == ["docs/**/*.md", "*.pdf"]
    assert source.exclude == ["drafts/"]
    assert source.sync_every_minutes == 60
    assert source.enabled
    assert LogEntry.objects.filter(object_id=str(source.pk), action_flag=1).exists()


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"config__folder__path": "/no/such/folder"}, "config__folder__path", "does not exist"),
        ({"config__folder__path": ""}, "config__folder__path", "needs 'path'"),
        ({"include": "docs/\n[z-a]"}, "include", "is not valid"),
        ({"exclude": "!"}, "exclude", "is not valid"),
        ({"metadata_map": "owner = team"}, "metadata_map", '"team" is not a metadata field'),
        ({"metadata_map": "owner team"}, "metadata_map", "source field = knowledge-base field"),
        ({"slug": "not a slug"}, "slug", "slug"),
        ({"delete_threshold_percent": "0"}, "delete_threshold_percent", "greater than"),
        ({"access_groups": "hr"}, "access_groups", "only assign access groups you hold"),
    ],
    ids=[
        "missing folder",
        "no path",
        "bad include",
        "bad exclude",
        "undeclared field",
        "mapping line",
        "slug",
        "threshold",
        "group not held",
    ],
)
def test_a_refused_source_says_why_on_the_field_and_saves_nothing(
    kb: KnowledgeBase, share: Path, ian: Client, fields: dict[str, str], field: str, words: str
) -> None:
    response = ian.post(ADD, folder_form(kb, share, **fields))

    errors = errors_of(response)
    assert field in errors, errors
    assert any(words in message for message in errors[field]), errors
    assert not Source.objects.exists()


def test_a_taken_slug_is_refused_on_the_slug(
    kb: KnowledgeBase, share: Path, ian: Client, folder_source: Callable[..., Source]
) -> None:
    folder_source(slug="policies")

    errors = errors_of(ian.post(ADD, folder_form(kb, share, name="Another")))

    assert "already has a source 'policies'" in errors["slug"][0]
    assert Source.objects.count() == 1


def test_the_change_page_edits_settings_patterns_and_metadata_map(
    kb: KnowledgeBase, ian: Client, folder_source: Callable[..., Source], tmp_path: Path
) -> None:
    metadata_field_save(kb=kb, name="team", type="string")
    source = folder_source()
    moved = tmp_path / "moved"
    moved.mkdir()

    page = ian.get(change_url(source))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="config__folder__path"' in html and str(source.config["path"]) in html
    assert 'name="config__s3__bucket"' not in html, "only the source's own kind"
    assert "Fields Handbook declares: team" in html
    assert 'id="sync-now-link"' in html and 'id="pause-link"' in html

    response = ian.post(
        change_url(source),
        change_form(
            source,
            name="Moved share",
            config__folder__path=str(moved),
            metadata_map="owner = team",
            exclude="*.tmp",
        ),
    )

    assert response.status_code == 302, errors_of(response)
    source.refresh_from_db()
    assert source.name == "Moved share"
    assert source.config == {"path": str(moved)}
    assert source.metadata_map == {"owner": "team"}
    assert source.exclude == ["*.tmp"]


def test_the_slug_cannot_change_once_the_source_has_documents(
    ian: Client, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    synced_document(source, "guide.md", "Guide.")

    errors = errors_of(ian.post(change_url(source), change_form(source, slug="renamed")))

    assert "cannot change once the source has documents" in errors["slug"][0]
    source.refresh_from_db()
    assert source.slug == "share"


def s3_form(kb: KnowledgeBase, **fields: Any) -> dict[str, Any]:
    data = {
        "kb": str(kb.pk),
        "kind": "s3",
        "name": "Bucket",
        "slug": "bucket",
        "enabled": "on",
        "config__s3__endpoint_url": "http://127.0.0.1:9",
        "config__s3__bucket": "handbook-docs",
        "config__s3__prefix": "policies",
        "config__s3__region": "",
        "credential__s3__access_key_id": "AKIDEXAMPLE",
        "credential__s3__secret_access_key": SECRET,
        "delete_threshold_percent": "20",
    }
    data.update(fields)
    return data


def test_credentials_are_stored_encrypted_and_never_shown_again(
    kb: KnowledgeBase, ian: Client
) -> None:
    response = ian.post(ADD, s3_form(kb))

    assert response.status_code == 302, errors_of(response)
    source = Source.objects.get()
    assert SECRET not in source.credentials_encrypted
    assert credentials_decrypt(source.credentials_encrypted) == {
        "access_key_id": "AKIDEXAMPLE",
        "secret_access_key": SECRET,
    }
    pages = [
        ian.get(change_url(source)),
        ian.get("/admin/sources/source/"),
        ian.get(f"/admin/sources/source/{source.pk}/history/"),
        ian.get(f"/admin/kb/knowledgebase/{kb.pk}/home/"),
        ian.get(f"/admin/sources/source/{source.pk}/sync/"),
    ]
    for page in pages:
        assert page.status_code == 200
        html = page.content.decode()
        assert SECRET not in html and "AKIDEXAMPLE" not in html
    change = pages[0].content.decode()
    assert "Stored, never shown: leave empty to keep it" in change
    assert re.search(
        r'<input type="password" name="credential__s3__secret_access_key"[^>]*>', change
    )
    assert 'value="' + SECRET not in change
    assert not any(SECRET in str(entry.change_message) for entry in LogEntry.objects.all()), (
        "not in the history either"
    )

    # saved again with the password inputs left empty: both kept
    kept = ian.post(change_url(source), change_form(source, name="Bucket (renamed)"))
    assert kept.status_code == 302, errors_of(kept)
    source.refresh_from_db()
    assert credentials_decrypt(source.credentials_encrypted)["secret_access_key"] == SECRET

    # one typed: replaced, the other kept
    replaced = ian.post(
        change_url(source), change_form(source, **{"credential__s3__access_key_id": "AKIDNEW"})
    )
    assert replaced.status_code == 302, errors_of(replaced)
    source.refresh_from_db()
    assert credentials_decrypt(source.credentials_encrypted) == {
        "access_key_id": "AKIDNEW",
        "secret_access_key": SECRET,
    }


def test_a_refused_form_does_not_send_the_typed_credential_back(
    kb: KnowledgeBase, ian: Client
) -> None:
    response = ian.post(ADD, s3_form(kb, config__s3__bucket="Not A Bucket"))

    errors = errors_of(response)
    assert "is not a bucket name" in errors["config__s3__bucket"][0]
    assert SECRET not in response.content.decode()
    assert not Source.objects.exists()


def test_without_an_encryption_key_credentials_are_refused_on_their_field(
    kb: KnowledgeBase, ian: Client, settings: Any
) -> None:
    settings.SOURCES_KEY = ""

    errors = errors_of(ian.post(ADD, s3_form(kb)))

    assert "CANON_SOURCES_KEY" in errors["credential__s3__access_key_id"][0]
    assert not Source.objects.exists()


# --- sync now, pause, resume ---------------------------------------------------------------


def test_sync_now_asks_first_then_starts_one_run_and_a_second_finds_it(
    ian: Client, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    url = f"/admin/sources/source/{source.pk}/sync/"

    page = ian.get(url)
    assert page.status_code == 200
    assert (
        b"Sync Share now" in page.content and b"deletes the documents of items gone" in page.content
    )
    assert not SyncRun.objects.exists(), "a GET changes nothing"

    first = ian.post(url, {"reason": "new files were added"})
    second = ian.post(url, {"reason": "again"})

    assert first.status_code == second.status_code == 302
    run = SyncRun.objects.get()
    assert run.requested_by is not None
    assert (run.state, run.trigger, run.requested_by.username) == ("queued", "manual", "ian")
    assert run.task is not None and run.task.kind == "sync"
    messages = [str(m) for m in ian.get(change_url(source)).context["messages"]]
    assert any(f"Sync run {run.pk} of Share was already under way" in m for m in messages)
    entries = LogEntry.objects.filter(object_id=str(source.pk)).values_list(
        "change_message", flat=True
    )
    assert f"Asked for sync run {run.pk}: new files were added" in entries


def test_pause_and_resume_behind_their_pages(
    ian: Client, folder_source: Callable[..., Source]
) -> None:
    source = folder_source(sync_every_minutes=30)

    assert (
        ian.post(f"/admin/sources/source/{source.pk}/pause/", {"reason": "migration"}).status_code
        == 302
    )
    source.refresh_from_db()
    assert not source.enabled
    page = ian.get(change_url(source)).content.decode()
    assert 'id="paused-note"' in page and 'id="resume-link"' in page
    assert 'id="sync-now-link"' not in page

    refused = ian.post(f"/admin/sources/source/{source.pk}/sync/", {"reason": "try"})
    assert refused.status_code == 302
    assert not SyncRun.objects.exists()
    messages = [str(m) for m in ian.get(change_url(source)).context["messages"]]
    assert any("Share is paused; resume it to sync it." in m for m in messages)

    assert (
        ian.post(f"/admin/sources/source/{source.pk}/resume/", {"reason": "done"}).status_code
        == 302
    )
    source.refresh_from_db()
    assert source.enabled


# --- runs --------------------------------------------------------------------------------


def test_the_run_page_shows_progress_counts_problems_and_the_time_split(
    ian: Client, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    run = SyncRun.objects.create(
        source=source,
        state=SyncRun.State.SYNCING,
        listed=40,
        to_process=10,
        processed=4,
        new=3,
        failed=1,
        seconds_listing=1.25,
        seconds_fetching=2.5,
        seconds_submitting=0.75,
        problems=[{"path": "big.pdf", "outcome": "failed", "reason": "larger than 50 MB"}],
    )

    page = ian.get(run_url(run))
    html = page.content.decode()
    assert page.status_code == 200
    assert f'data-run-progress="/admin/sources/syncrun/{run.pk}/progress/"' in html
    assert 'value="40"' in html and "Submitting: 4 of 10 (40 listed)" in html
    assert '<td class="n" data-count="new">3</td>' in html
    assert "big.pdf" in html and "larger than 50 MB" in html
    assert "1.25 s" in html and "2.50 s" in html and "0.75 s" in html
    assert "Decided once the listing is complete." in html

    progress = ian.get(f"/admin/sources/syncrun/{run.pk}/progress/").json()
    assert (progress["state"], progress["percent"], progress["processed"]) == ("syncing", 40, 4)
    assert progress["counts"]["new"] == 3

    listing = ian.get(f"/admin/sources/syncrun/?source__id__exact={source.pk}")
    assert listing.status_code == 200 and f"Run {run.pk}".encode() in listing.content


def test_confirm_deletions_names_readable_documents_counts_the_rest_and_deletes(
    tenant: Tenant, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    for name in ("a.md", "b.md", "c.md"):
        synced_document(source, name, f"Text of {name}.")
    synced_document(source, "payroll.md", "Salaries.", groups=("hr",))
    synced_document(source, "kept.md", "Still there.")
    run = awaiting_run(source, ["a.md", "b.md", "c.md", "payroll.md"])
    ian = index_admin(tenant)

    page = ian.get(run_url(run)).content.decode()
    assert 'id="confirm-deletions-link"' in page and 'id="keep-documents-link"' in page
    assert "4 documents wait for a person to confirm their deletion" in page
    confirm_page = ian.get(f"/admin/sources/syncrun/{run.pk}/confirm-deletions/")
    html = confirm_page.content.decode()
    assert confirm_page.status_code == 200
    assert "a.md" in html and "b.md" in html and "c.md" in html
    assert "payroll.md" not in html
    assert "1 more in documents you cannot read." in html
    assert "4 would be deleted" in html
    assert not Document.objects.filter(deleted_at__isnull=False).exists(), "a GET deletes nothing"

    response = ian.post(
        f"/admin/sources/syncrun/{run.pk}/confirm-deletions/", {"reason": "moved away"}
    )

    assert response.status_code == 302 and response["Location"] == run_url(run)
    deleted = set(Document.objects.filter(deleted_at__isnull=False).values_list("key", flat=True))
    assert deleted == {"share/a.md", "share/b.md", "share/c.md", "share/payroll.md"}
    run.refresh_from_db()
    assert run.confirmed_by is not None
    assert (run.state, run.deleted, run.confirmed_by.username) == ("succeeded", 4, "ian")
    again = ian.post(f"/admin/sources/syncrun/{run.pk}/confirm-deletions/", {"reason": "twice"})
    assert again.status_code == 302
    messages = [str(m) for m in ian.get(run_url(run)).context["messages"]]
    assert any("holds no deletions" in m for m in messages)


def test_keep_documents_closes_the_run_and_deletes_nothing(
    ian: Client, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    synced_document(source, "a.md", "A.")
    synced_document(source, "b.md", "B.")
    run = awaiting_run(source, ["a.md", "b.md"])

    response = ian.post(f"/admin/sources/syncrun/{run.pk}/keep-documents/", {"reason": "outage"})

    assert response.status_code == 302
    run.refresh_from_db()
    assert run.state == "succeeded" and "Kept" in run.deletion_note
    assert not Document.objects.filter(deleted_at__isnull=False).exists()
    assert not SourceItem.objects.filter(pending_delete_run__isnull=False).exists()
    page = ian.get(run_url(run)).content.decode()
    assert 'id="confirm-deletions-link"' not in page and 'id="answered"' in page


# --- who may ----------------------------------------------------------------------------


def test_content_managers_see_sources_and_runs_but_may_not_act(
    tenant: Tenant, carol: Client, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    synced_document(source, "a.md", "A.")
    run = awaiting_run(source, ["a.md"])

    assert carol.get("/admin/sources/source/").status_code == 200
    page = carol.get(change_url(source))
    html = page.content.decode()
    assert page.status_code == 200
    assert str(source.config["path"]) in html and "none needed" in html
    for control in ('id="sync-now-link"', 'id="pause-link"', 'name="config__folder__path"'):
        assert control not in html, control
    run_page = carol.get(run_url(run)).content.decode()
    assert "wait for a person" in run_page and "an index admin answers" in run_page
    assert 'id="confirm-deletions-link"' not in run_page
    assert carol.get(f"/admin/sources/syncrun/{run.pk}/progress/").status_code == 200
    assert carol.get(ADD).status_code == 403

    for url in (
        f"/admin/sources/source/{source.pk}/sync/",
        f"/admin/sources/source/{source.pk}/pause/",
        f"/admin/sources/syncrun/{run.pk}/confirm-deletions/",
        f"/admin/sources/syncrun/{run.pk}/keep-documents/",
    ):
        refused = carol.post(url, {"reason": "let me"})
        assert refused.status_code == 403, url
        assert b"You may not do this" in refused.content
        assert b"Index admins have it" in refused.content
    assert carol.post(change_url(source), change_form(source, name="Mine")).status_code == 403
    source.refresh_from_db()
    run.refresh_from_db()
    assert source.name == "Share" and source.enabled
    assert SyncRun.objects.count() == 1 and run.state == "awaiting_confirmation"
    assert not Document.objects.filter(deleted_at__isnull=False).exists()


def test_another_tenants_staff_get_what_a_missing_id_gets(
    folder_source: Callable[..., Source],
) -> None:
    source = folder_source()
    synced_document(source, "a.md", "A.")
    run = awaiting_run(source, ["a.md"])
    rival = Tenant.objects.create(name="Rival", slug="rival")
    knowledge_base_create(tenant=rival, name="Rival handbook", slug="rival-handbook")
    outsider = index_admin(rival, name="otto")
    missing = 10**9

    assert b"Share" not in outsider.get("/admin/sources/source/").content
    assert b"Share" not in outsider.get("/admin/sources/syncrun/").content
    for theirs, nothing in [
        (f"/admin/sources/source/{source.pk}/sync/", f"/admin/sources/source/{missing}/sync/"),
        (f"/admin/sources/source/{source.pk}/pause/", f"/admin/sources/source/{missing}/pause/"),
        (
            f"/admin/sources/syncrun/{run.pk}/confirm-deletions/",
            f"/admin/sources/syncrun/{missing}/confirm-deletions/",
        ),
        (
            f"/admin/sources/syncrun/{run.pk}/progress/",
            f"/admin/sources/syncrun/{missing}/progress/",
        ),
    ]:
        for method in ("get", "post"):
            answer = getattr(outsider, method)(theirs, {"reason": "x"})
            assert answer.status_code == 404, (method, theirs)
            assert (
                answer.status_code
                == getattr(outsider, method)(nothing, {"reason": "x"}).status_code
            )
    assert outsider.get(change_url(source)).status_code == 302  # Django's redirect, as for none
    assert SyncRun.objects.count() == 1


def test_the_source_form_offers_only_the_users_knowledge_bases(
    kb: KnowledgeBase, share: Path, ian: Client
) -> None:
    rival = Tenant.objects.create(name="Rival", slug="rival")
    theirs = knowledge_base_create(tenant=rival, name="Rival handbook", slug="rival-handbook")

    page = ian.get(ADD).content.decode()
    errors = errors_of(ian.post(ADD, folder_form(theirs, share)))

    assert "Rival handbook" not in page
    assert "kb" in errors
    assert not Source.objects.exists()


# --- the knowledge base's home and the document page -----------------------------------------


def test_the_home_lists_sources_with_their_last_run(
    kb: KnowledgeBase, ian: Client, carol: Client, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    quiet = folder_source(name="Archive", slug="archive", folder="archive")
    source_pause(source=quiet, paused=True)
    synced_document(source, "a.md", "A.")
    run = awaiting_run(source, ["a.md"])

    html = ian.get(f"/admin/kb/knowledgebase/{kb.pk}/home/").content.decode()

    assert 'id="kb-sources"' in html
    assert f'href="/admin/sources/source/{source.pk}/change/">Share</a>' in html
    assert 'Archive</a> <span class="canon-quiet">(paused)</span>' in html
    assert f'href="/admin/sources/syncrun/{run.pk}/change/"' in html
    assert "awaiting confirmation" in html
    assert 'id="add-source-link"' in html
    assert (
        'id="add-source-link"'
        not in carol.get(f"/admin/kb/knowledgebase/{kb.pk}/home/").content.decode()
    )


def test_the_document_page_names_its_source_path_and_version(
    ian: Client, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    document = synced_document(source, "faq/billing.txt", "Invoices go out monthly.")

    html = ian.get(f"/admin/kb/document/{document.pk}/change/").content.decode()

    assert re.search(
        rf'From source <a href="/admin/sources/source/{source.pk}/change/">Share</a>: '
        r"<code>faq/billing.txt</code>, version <code>v-faq/billing.txt</code>",
        html,
    ), html[:3000]


def test_a_document_without_a_manifest_row_names_no_source(
    ian: Client, folder_source: Callable[..., Source]
) -> None:
    document = synced_document(folder_source(), "x.txt", "X.")
    SourceItem.objects.filter(document=document).delete()

    html = ian.get(f"/admin/kb/document/{document.pk}/change/").content.decode()

    assert 'id="document-source"' not in html
