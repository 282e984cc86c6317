"""Issue 26, items 3 and 4. *Upload files* turns a file into a new revision of the document its
name matches only after the uploader confirmed it on a page that lists those files with their
documents (the files kept across the step for this session alone); new documents go ahead at
once. A key held by a document the uploader may not write — restricted, or deleted — gets one
answer, the API's, in *Upload files* and *Add* alike; *Add* points to the New revision field of
a document the user may read."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.core.files.uploadedfile import SimpleUploadedFile

from kb.models import Document, Revision
from kb.services.documents import document_delete
from retrieval.api.uploads import key_unavailable
from tests.console.admin_world import MARK_HR, World, build_world
from tests.retrieval.factories import publish

pytestmark = pytest.mark.django_db

UPLOAD = "/admin/kb/document/upload/"
CONFIRM = "/admin/kb/document/upload/revisions/"


@pytest.fixture
def world(db: None) -> World:
    return build_world()


def text_file(name: str, text: str) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, text.encode(), content_type="text/plain")


def shown(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def confirmation_data(page: Any) -> dict[str, str]:
    """The confirmation form's fields as the page rendered them (boxes ticked)."""
    content = page.content.decode()
    form = content[content.index('action="' + CONFIRM) :]
    data = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form))
    for name in re.findall(r'<input type="checkbox" name="([^"]+)"[^>]*checked', form):
        data[name] = "on"
    data.pop("csrfmiddlewaretoken", None)
    return {k: html.unescape(v) for k, v in data.items()}


def test_a_clashing_bulk_upload_asks_first_and_new_documents_go_ahead(world: World) -> None:
    carol = world.client("carol")
    vacation = world.open_doc
    before = vacation.revisions.count()

    # given a file named like a document she may write, and one named like none
    page = carol.post(
        UPLOAD,
        {
            "kb": world.kb_b.pk,
            "files": [
                text_file("vacation.txt", "Expenses: taxis."),
                text_file("memo.txt", "Memo."),
            ],
        },
    )

    # then the new document is created at once, and the clash waits on a confirmation page
    assert page.status_code == 200
    assert any(m.startswith("New document memo from memo.txt") for m in shown(page))
    assert Document.objects.filter(kb=world.kb_b, key="memo").exists()
    assert vacation.revisions.count() == before  # not yet
    content = page.content.decode()
    assert "1 file would become a new revision" in content
    assert "it will become a new revision of it" in content
    assert f'href="/admin/kb/document/{vacation.pk}/change/"' in content
    assert f"revision {before + 1} of" in content and "vacation.txt" in content

    # when she confirms, the file becomes the next revision, in the document's history
    done = carol.post(CONFIRM, confirmation_data(page), follow=True)
    assert f"Revision {before + 1} of vacation from vacation.txt (16\xa0bytes)." in shown(done)
    revision = Revision.objects.get(document=vacation, number=before + 1)
    assert revision.original_name == "vacation.txt"
    entry = LogEntry.objects.filter(object_id=str(vacation.pk)).latest("id")
    assert entry.get_change_message().endswith(f"revision {before + 1} with Upload files.")


def test_declining_uploads_none_and_an_unticked_file_is_left_out(world: World) -> None:
    carol = world.client("carol")
    publish(world.kb_b, "travel", "Trains.")
    files = [text_file("vacation.txt", "Other."), text_file("travel.txt", "Buses.")]
    counts = {d.key: d.revisions.count() for d in Document.objects.filter(kb=world.kb_b)}

    page = carol.post(UPLOAD, {"kb": world.kb_b.pk, "files": files})
    declined = carol.post(CONFIRM, {**confirmation_data(page), "cancel": "1"}, follow=True)
    assert "Not uploaded, as you chose: vacation.txt, travel.txt." in shown(declined)

    files = [text_file("vacation.txt", "Other."), text_file("travel.txt", "Buses.")]
    page = carol.post(UPLOAD, {"kb": world.kb_b.pk, "files": files})
    data = confirmation_data(page)
    data.pop("replace-0")  # vacation.txt unticked
    done = carol.post(CONFIRM, data, follow=True)
    assert "Not uploaded, as you chose: vacation.txt." in shown(done)
    after = {d.key: d.revisions.count() for d in Document.objects.filter(kb=world.kb_b)}
    assert after["vacation"] == counts["vacation"] and after["travel"] == counts["travel"] + 1


def test_the_kept_files_are_redeemed_only_by_the_session_that_chose_them(world: World) -> None:
    carol, ian = world.client("carol"), world.client("ian")
    before = world.open_doc.revisions.count()
    page = carol.post(UPLOAD, {"kb": world.kb_b.pk, "files": [text_file("vacation.txt", "X.")]})
    stolen = ian.post(CONFIRM, confirmation_data(page), follow=True)
    assert "Not uploaded: a file is no longer kept; choose it again." in shown(stolen)
    assert world.open_doc.revisions.count() == before


def test_a_restricted_key_and_a_deleted_key_get_one_answer(world: World) -> None:
    carol = world.client("carol")
    gone = publish(world.kb_b, "old-memo", "An old memo.").document
    document_delete(document_id=gone.pk, actor=None)
    hr_revisions = world.hr_doc.revisions.count()

    response = carol.post(
        UPLOAD,
        {
            "kb": world.kb_b.pk,
            "files": [text_file("salaries.txt", "New pay."), text_file("old-memo.txt", "Memo.")],
        },
        follow=True,
    )
    restricted, deleted = (m for m in shown(response) if m.startswith("Not uploaded"))
    assert restricted == f"Not uploaded: salaries.txt: {key_unavailable('salaries').message}"
    assert restricted.replace("salaries", "K") == deleted.replace("old-memo", "K")
    assert world.hr_doc.revisions.count() == hr_revisions and gone.revisions.count() == 1
    assert MARK_HR not in response.content.decode()

    # Add answers both alike too; a document she may read is pointed to its New revision field
    def add(key: str) -> str:
        data = {
            "kb": world.kb_b.pk,
            "key": key,
            "title": "",
            "access_groups": "",
            "revisions-TOTAL_FORMS": "0",
            "revisions-INITIAL_FORMS": "0",
            "file": text_file("x.txt", "Some text."),
        }
        page = carol.post("/admin/kb/document/add/", data)
        assert page.status_code == 200
        errors = page.context["adminform"].form.errors["key"]
        assert MARK_HR not in page.content.decode()
        return str(errors[0])

    assert add("salaries") == key_unavailable("salaries").message
    assert add("old-memo") == key_unavailable("old-memo").message
    open_one = add("vacation")
    assert open_one.startswith("A document with key “vacation” already exists.")
    assert f'href="/admin/kb/document/{world.open_doc.pk}/change/#id_new_revision"' in open_one
