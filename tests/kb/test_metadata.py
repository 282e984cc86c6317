"""Issue 25, item 1: metadata fields a knowledge base declares, the services that change them
and documents' values, and the per-knowledge-base summary (counts only readable documents)."""

from __future__ import annotations

import pytest

from kb.access import Reader
from kb.metadata import MetadataInvalid
from kb.models import Document, KnowledgeBase, MetadataField
from kb.selectors.metadata import metadata_field_retype_problem, metadata_summary
from kb.services.documents import document_delete
from kb.services.metadata import (
    documents_metadata_set,
    metadata_field_delete,
    metadata_field_save,
)
from tests.retrieval.factories import upload

pytestmark = pytest.mark.django_db


def doc(kb: KnowledgeBase, key: str, metadata: dict, groups: tuple[str, ...] = ()) -> Document:
    document = upload(kb, key, f"# {key}\n\nText of {key}.", groups).document
    Document.objects.filter(pk=document.pk).update(metadata=metadata)
    document.refresh_from_db()
    return document


def test_a_type_change_renormalises_every_documents_value(kb: KnowledgeBase) -> None:
    # given documents holding a year as a string and one holding a tag as a string
    a = doc(kb, "a", {"valid_until": "2025-03-01T10:00:00", "tags": "hr"})
    b = doc(kb, "b", {"valid_until": "2026-01-31"})

    # when the fields are declared as date and list of strings
    metadata_field_save(kb=kb, name="valid_until", type="date")
    metadata_field_save(kb=kb, name="tags", type="string_list")

    # then the stored values are in the types' stored forms
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.metadata == {"valid_until": "2025-03-01", "tags": ["hr"]}
    assert b.metadata == {"valid_until": "2026-01-31"}


def test_a_type_change_a_value_does_not_fit_is_refused_naming_the_document(
    kb: KnowledgeBase,
) -> None:
    # given a string field and two documents, one holding a value that is no number
    metadata_field_save(kb=kb, name="year", type="string")
    doc(kb, "fine", {})
    doc(kb, "odd", {"year": "twenty"})

    # when the field is changed to a number
    with pytest.raises(MetadataInvalid) as refused:
        metadata_field_save(kb=kb, name="year", type="number")

    # then nothing changed, and the refusal names the document (the admin's dry run too)
    assert "odd" in str(refused.value) and refused.value.field == "year"
    assert MetadataField.objects.get(kb=kb, name="year").type == "string"
    assert metadata_field_retype_problem(kb=kb, name="year", type="number") == str(refused.value)
    assert metadata_field_retype_problem(kb=kb, name="year", type="string") is None


def test_a_built_in_or_malformed_name_is_refused(kb: KnowledgeBase) -> None:
    for name in ("title", "Year", "1st", ""):
        with pytest.raises(MetadataInvalid):
            metadata_field_save(kb=kb, name=name, type="string")


def test_deleting_a_field_strips_its_values(kb: KnowledgeBase) -> None:
    metadata_field_save(kb=kb, name="department", type="string")
    metadata_field_save(kb=kb, name="year", type="number")
    a = doc(kb, "a", {"department": "hr", "year": 2024})
    b = doc(kb, "b", {"year": 2023})

    stripped = metadata_field_delete(kb=kb, name="department")

    assert stripped == 1
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.metadata, b.metadata) == ({"year": 2024}, {"year": 2023})
    assert not MetadataField.objects.filter(kb=kb, name="department").exists()
    assert metadata_field_delete(kb=kb, name="department") == 0  # idempotent


def test_a_bulk_set_is_all_or_nothing(kb: KnowledgeBase) -> None:
    metadata_field_save(kb=kb, name="year", type="number")
    metadata_field_save(kb=kb, name="department", type="string")
    a = doc(kb, "a", {"year": 2020})
    b = doc(kb, "b", {"department": "legal"})

    # a value that fits: set on both, other fields kept; null removes
    changed = documents_metadata_set(
        kb=kb, document_ids=[a.pk, b.pk], values={"department": "hr", "year": None}
    )
    assert changed == 2
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.metadata, b.metadata) == ({"department": "hr"}, {"department": "hr"})

    # a misfit refuses the whole edit
    with pytest.raises(MetadataInvalid):
        documents_metadata_set(kb=kb, document_ids=[a.pk, b.pk], values={"year": "soon"})
    a.refresh_from_db()
    assert a.metadata == {"department": "hr"}


def test_the_summary_counts_only_documents_the_reader_may_read(kb: KnowledgeBase) -> None:
    # given typed fields and four documents: one restricted to hr, one deleted
    for name, kind in (
        ("department", "string"),
        ("year", "number"),
        ("valid_until", "date"),
        ("public", "boolean"),
        ("tags", "string_list"),
    ):
        metadata_field_save(kb=kb, name=name, type=kind)
    doc(kb, "a", {"department": "sales", "year": 2021, "tags": ["x", "y"], "public": True})
    doc(kb, "b", {"department": "sales", "year": 2024, "valid_until": "2026-01-01", "tags": ["x"]})
    doc(kb, "secret", {"department": "hrsecret", "year": 1999, "tags": ["pay"]}, ("hr",))
    gone = doc(kb, "gone", {"department": "deleted-dept", "year": 3000})
    document_delete(document_id=gone.pk, actor=None, reason="test")

    # when the summary is read by someone outside hr
    outsider = metadata_summary(
        kb=kb, reader=Reader(tenant_id=kb.tenant_id, access_groups=frozenset())
    )

    # then the restricted and the deleted documents count nowhere
    fields = {f.name: f for f in outsider.fields}
    assert outsider.documents == 2
    assert fields["department"].documents == 2 and fields["department"].values == [("sales", 2)]
    assert (fields["year"].min, fields["year"].max) == (2021, 2024)
    assert (fields["valid_until"].min, fields["valid_until"].max) == ("2026-01-01", "2026-01-01")
    assert fields["public"].values == [(True, 1)]
    assert fields["tags"].values == [("x", 2), ("y", 1)]
    assert fields["content_type"].built_in and fields["content_type"].values == [("text/plain", 2)]
    assert "hrsecret" not in repr(outsider) and "1999" not in repr(outsider)

    # and someone in hr sees the restricted document too
    insider = metadata_summary(
        kb=kb, reader=Reader(tenant_id=kb.tenant_id, access_groups=frozenset({"hr"}))
    )
    fields = {f.name: f for f in insider.fields}
    assert insider.documents == 3 and fields["year"].min == 1999
    assert ("pay", 1) in fields["tags"].values


def test_the_summary_lists_keys_no_field_declares(kb: KnowledgeBase) -> None:
    doc(kb, "a", {"source": "wiki", "lang": "en"})
    doc(kb, "b", {"source": "drive"})
    summary = metadata_summary(kb=kb, reader=Reader(kb.tenant_id, frozenset(), all_groups=True))
    assert summary.undeclared == [("source", 2), ("lang", 1)]
    assert [f.name for f in summary.fields] == ["content_type"]
