"""Issue 25, item 1 in the admin: index admins declare a knowledge base's metadata fields on its
settings page (saved through the services; a misfit type change is a form error, a delete has
its confirmation); content managers set documents' values on the document page (typed inputs,
compare-and-set as for the title) and in bulk from the document list; the home's summary counts
only documents the user may read."""

from __future__ import annotations

import html
import re
from datetime import date
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from kb.models import Document, KnowledgeBase, MetadataField
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.metadata import metadata_field_save
from tests.console.admin_world import staff
from tests.retrieval.factories import upload

pytestmark = pytest.mark.django_db

LIST = "/admin/kb/document/"


@pytest.fixture
def users(kb: KnowledgeBase) -> dict[str, User]:
    ensure_roles(Group, Permission)
    return {
        "ian": staff("ian", INDEX_ADMINS, kb.tenant),
        "carol": staff("carol", CONTENT_MANAGERS, kb.tenant),  # not in hr
        "harry": staff("harry", CONTENT_MANAGERS, kb.tenant, ["hr"]),
    }


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text(response: Any) -> str:
    return html.unescape(response.content.decode())


def words(response: Any) -> str:
    """The page's text without its tags, spaces collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", text(response)).split())


def _posted(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    if isinstance(value, date):
        return value.isoformat()
    return "" if value is None else value


def form_data(form: Any, prefix: str = "") -> dict[str, Any]:
    """What a browser posts back for `form` as rendered (hidden initials included)."""
    data: dict[str, Any] = {}
    for name, field in form.fields.items():
        bound = form[name]
        value = bound.value()
        if isinstance(value, bool) or getattr(field.widget, "input_type", "") == "checkbox":
            if value:
                data[bound.html_name] = "on"
        elif getattr(field.widget, "input_type", "") != "file":
            data[bound.html_name] = _posted(field.prepare_value(value))
        if field.show_hidden_initial:
            data[bound.html_initial_name] = _posted(field.prepare_value(bound.initial))
    return data


def settings_page(client: Client, kb: KnowledgeBase) -> dict[str, Any]:
    page = client.get(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    assert page.status_code == 200
    data = form_data(page.context["adminform"].form)
    for inline in page.context["inline_admin_formsets"]:
        formset = inline.formset
        management = formset.management_form
        data.update({management[n].html_name: management[n].value() for n in management.fields})
        for form in formset.forms:
            data.update(form_data(form))
    return data


def document_page(client: Client, document: Document) -> dict[str, Any]:
    page = client.get(f"/admin/kb/document/{document.pk}/change/")
    assert page.status_code == 200
    data = form_data(page.context["adminform"].form)
    data.update({"revisions-TOTAL_FORMS": "0", "revisions-INITIAL_FORMS": "0", "_continue": "1"})
    return data


# --- declaring fields --------------------------------------------------------------------------


def test_an_index_admin_declares_a_field_on_the_settings_page(
    kb: KnowledgeBase, users: dict[str, User]
) -> None:
    client = logged_in(users["ian"])
    data = settings_page(client, kb)
    data.update(
        {
            "metadata_fields-0-name": "department",
            "metadata_fields-0-type": "string",
            "metadata_fields-0-description": "Who owns it",
        }
    )
    saved = client.post(f"/admin/kb/knowledgebase/{kb.pk}/change/", data)
    assert saved.status_code == 302, text(saved)[:3000]
    field = MetadataField.objects.get(kb=kb, name="department")
    assert (field.type, field.description) == ("string", "Who owns it")
    # the timeline says so
    home = client.get(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    assert "Declared metadata field department (string)" in words(home)


def test_a_content_manager_may_not_declare_fields(
    kb: KnowledgeBase, users: dict[str, User]
) -> None:
    client = logged_in(users["carol"])
    assert not users["carol"].has_perm("kb.add_metadatafield")
    assert users["carol"].has_perm("kb.view_metadatafield")
    assert users["ian"].has_perm("kb.add_metadatafield")
    assert users["ian"].has_perm("kb.delete_metadatafield")
    page = client.get(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    assert 'name="metadata_fields-0-name"' not in page.content.decode()
    posted = client.post(
        f"/admin/kb/knowledgebase/{kb.pk}/change/",
        {
            "name": kb.name,
            "metadata_fields-TOTAL_FORMS": "1",
            "metadata_fields-INITIAL_FORMS": "0",
            "metadata_fields-0-name": "department",
            "metadata_fields-0-type": "string",
        },
    )
    assert posted.status_code == 403
    assert not MetadataField.objects.filter(kb=kb).exists()
    field = metadata_field_save(kb=kb, name="year", type="number")
    refused = client.get(f"/admin/kb/knowledgebase/{kb.pk}/metadata-fields/{field.pk}/delete/")
    assert refused.status_code == 403


def test_a_type_change_a_value_does_not_fit_is_a_form_error(
    kb: KnowledgeBase, users: dict[str, User]
) -> None:
    metadata_field_save(kb=kb, name="year", type="string")
    document = upload(kb, "odd", "Odd.").document
    Document.objects.filter(pk=document.pk).update(metadata={"year": "twenty"})
    client = logged_in(users["ian"])
    data = settings_page(client, kb)
    data["metadata_fields-0-type"] = "number"
    refused = client.post(f"/admin/kb/knowledgebase/{kb.pk}/change/", data)
    assert refused.status_code == 200
    assert 'Document odd holds a value of "year" that is not a number' in text(refused)
    assert MetadataField.objects.get(kb=kb, name="year").type == "string"


def test_a_delete_is_confirmed_with_the_count_of_documents_holding_a_value(
    kb: KnowledgeBase, users: dict[str, User]
) -> None:
    field = metadata_field_save(kb=kb, name="department", type="string")
    for key in ("a", "b"):
        document = upload(kb, key, f"{key}.").document
        Document.objects.filter(pk=document.pk).update(metadata={"department": "hr"})
    client = logged_in(users["ian"])
    url = f"/admin/kb/knowledgebase/{kb.pk}/metadata-fields/{field.pk}/delete/"
    settings = client.get(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    assert url in settings.content.decode()

    page = client.get(url)
    assert "2 documents hold a value; it is removed from each" in text(page)
    done = client.post(url, {"reason": "not used"})
    assert done.status_code == 302
    assert not MetadataField.objects.filter(kb=kb).exists()
    assert list(Document.objects.filter(kb=kb).values_list("metadata", flat=True)) == [{}, {}]


# --- one document's values ---------------------------------------------------------------------


@pytest.fixture
def typed_kb(kb: KnowledgeBase) -> KnowledgeBase:
    for name, kind in (
        ("department", "string"),
        ("year", "number"),
        ("valid_until", "date"),
        ("public", "boolean"),
        ("tags", "string_list"),
    ):
        metadata_field_save(kb=kb, name=name, type=kind)
    return kb


def test_the_document_page_has_one_typed_input_per_field(
    typed_kb: KnowledgeBase, users: dict[str, User]
) -> None:
    document = upload(typed_kb, "travel", "Trains.").document
    Document.objects.filter(pk=document.pk).update(
        metadata={"year": 2024, "valid_until": "2026-01-31", "tags": ["a", "b"]}
    )
    client = logged_in(users["carol"])
    page = client.get(f"/admin/kb/document/{document.pk}/change/").content.decode()
    assert 'type="text" name="metadata__department"' in page
    assert 'type="number" name="metadata__year" value="2024"' in page
    assert 'type="date" name="metadata__valid_until" value="2026-01-31"' in page
    assert 'type="checkbox" name="metadata__public"' in page
    assert 'name="metadata__tags" value="a, b"' in page

    data = document_page(client, document)
    data.update(
        {
            "metadata__department": "hr",
            "metadata__public": "on",
            "metadata__tags": "b, c, c",
            "metadata__year": "",
        }
    )
    saved = client.post(f"/admin/kb/document/{document.pk}/change/", data)
    assert saved.status_code == 302, text(saved)[:2000]
    document.refresh_from_db()
    assert document.metadata == {
        "department": "hr",
        "public": True,
        "tags": ["b", "c"],
        "valid_until": "2026-01-31",
    }


def test_a_misfit_value_is_an_error_naming_its_field(
    typed_kb: KnowledgeBase, users: dict[str, User]
) -> None:
    document = upload(typed_kb, "travel", "Trains.").document
    client = logged_in(users["carol"])
    data = document_page(client, document)
    data["metadata__tags"] = "ok, " + "x" * 501
    refused = client.post(f"/admin/kb/document/{document.pk}/change/", data)
    assert refused.status_code == 200
    errors = refused.context["adminform"].form.errors
    assert '"tags" is longer than 500 characters' in errors["metadata__tags"][0]
    document.refresh_from_db()
    assert document.metadata == {}


def test_a_page_left_open_never_writes_back_a_value_it_did_not_show(
    typed_kb: KnowledgeBase, users: dict[str, User]
) -> None:
    # given a page opened while the year was 2024
    document = upload(typed_kb, "travel", "Trains.").document
    Document.objects.filter(pk=document.pk).update(metadata={"year": 2024})
    client = logged_in(users["carol"])
    data = document_page(client, document)
    url = f"/admin/kb/document/{document.pk}/change/"

    # when someone else sets the year to 2025 and a department
    Document.objects.filter(pk=document.pk).update(
        metadata={"year": 2025, "valid_until": "2027-01-01"}
    )

    # then an edit of the department alone keeps the values the page did not show current
    saved = client.post(url, {**data, "metadata__department": "legal"})
    assert saved.status_code == 302
    document.refresh_from_db()
    assert document.metadata == {"year": 2025, "valid_until": "2027-01-01", "department": "legal"}

    # and an edit of the year it showed as 2024 is refused with the value it has now
    refused = client.post(url, {**data, "metadata__year": "2030"})
    assert refused.status_code == 200
    assert "Changed since you opened this page: it is now “2025”." in text(refused)
    document.refresh_from_db()
    assert document.metadata["year"] == 2025


def test_a_knowledge_base_without_fields_edits_metadata_as_json(
    kb: KnowledgeBase, users: dict[str, User]
) -> None:
    document = upload(kb, "travel", "Trains.").document
    client = logged_in(users["carol"])
    data = document_page(client, document)
    assert "metadata" in data
    saved = client.post(
        f"/admin/kb/document/{document.pk}/change/",
        {**data, "metadata": '{"source": "wiki"}'},
    )
    assert saved.status_code == 302
    document.refresh_from_db()
    assert document.metadata == {"source": "wiki"}
    refused = client.post(
        f"/admin/kb/document/{document.pk}/change/",
        {**document_page(client, document), "metadata": "[1]"},
    )
    assert "Metadata is a JSON object" in text(refused)


def test_the_add_form_sets_metadata_checked_against_the_fields(
    typed_kb: KnowledgeBase, users: dict[str, User]
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    client = logged_in(users["carol"])
    base = {
        "kb": typed_kb.pk,
        "key": "new",
        "title": "",
        "access_groups": "",
        "revisions-TOTAL_FORMS": "0",
        "revisions-INITIAL_FORMS": "0",
    }
    refused = client.post(
        "/admin/kb/document/add/",
        {**base, "metadata": '{"year": "soon"}', "file": SimpleUploadedFile("n.txt", b"New.")},
    )
    assert refused.status_code == 200
    assert '"year" is a number field' in text(refused)
    added = client.post(
        "/admin/kb/document/add/",
        {**base, "metadata": '{"year": 2024}', "file": SimpleUploadedFile("n.txt", b"New.")},
    )
    assert added.status_code == 302, added.context["adminform"].form.errors
    assert Document.objects.get(kb=typed_kb, key="new").metadata == {"year": 2024}


# --- bulk edit ---------------------------------------------------------------------------------


def test_set_metadata_on_selected_documents_after_a_confirmation(
    typed_kb: KnowledgeBase, users: dict[str, User]
) -> None:
    a = upload(typed_kb, "a", "A.").document
    b = upload(typed_kb, "b", "B.").document
    secret = upload(typed_kb, "secret", "S.", ("hr",)).document
    Document.objects.filter(pk=a.pk).update(metadata={"year": 2020, "department": "sales"})
    client = logged_in(users["carol"])
    selected = {"action": "set_metadata", "_selected_action": [a.pk, b.pk, secret.pk]}

    # the values form lists the selected documents she may read
    form = client.post(LIST, selected)
    assert form.status_code == 200
    assert "metadata__year" in form.content.decode() and "secret" not in text(form)

    # the confirmation lists each document and what changes
    preview = client.post(
        LIST, {**selected, "stage": "preview", "metadata__year": "2024", "remove__department": "on"}
    )
    page = text(preview)
    assert preview.status_code == 200 and "Set metadata on 2 documents" in page
    assert "year: 2020 → 2024" in page and "department: sales → —" in page
    assert "year: — → 2024" in page
    assert MetadataField.objects.count() == 5 and Document.objects.get(pk=b.pk).metadata == {}

    # confirmed with a reason, the values are set, all at once
    values_json = preview.context["values_json"]
    done = client.post(
        LIST, {**selected, "stage": "confirm", "values_json": values_json, "reason": "yearly"}
    )
    assert done.status_code == 302
    assert Document.objects.get(pk=a.pk).metadata == {"year": 2024}
    assert Document.objects.get(pk=b.pk).metadata == {"year": 2024}
    assert Document.objects.get(pk=secret.pk).metadata == {}  # not hers to read


def test_a_bulk_misfit_is_an_error_on_its_input(
    typed_kb: KnowledgeBase, users: dict[str, User]
) -> None:
    a = upload(typed_kb, "a", "A.").document
    client = logged_in(users["carol"])
    refused = client.post(
        LIST,
        {
            "action": "set_metadata",
            "_selected_action": [a.pk],
            "stage": "preview",
            "metadata__tags": "x" * 501,
        },
    )
    assert refused.status_code == 200
    assert '"tags" is longer than 500 characters' in text(refused)


# --- the summary on the home -------------------------------------------------------------------


def test_the_home_summary_counts_only_documents_the_user_may_read(
    typed_kb: KnowledgeBase, users: dict[str, User]
) -> None:
    for key, groups, department in (
        ("a", (), "sales"),
        ("b", (), "sales"),
        ("pay", ("hr",), "hrsecretxq"),
    ):
        document = upload(typed_kb, key, f"{key}.", groups).document
        Document.objects.filter(pk=document.pk).update(metadata={"department": department})
    home = f"/admin/kb/knowledgebase/{typed_kb.pk}/home/"

    carol = words(logged_in(users["carol"]).get(home))
    assert "sales (2)" in carol and "hrsecretxq" not in carol
    assert "2 of 2" in carol

    harry = words(logged_in(users["harry"]).get(home))
    assert "hrsecretxq (1)" in harry and "3 of 3" in harry
