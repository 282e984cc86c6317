"""Context and citations through the API: the passage around a hit (neighbours or its section)
from the hit's own build, read in one statement for all hits, with the hit's span marked and
overlaps once; highlights of the query's terms; and a citation pinned to the revision that
still opens its text after the document changes, until the purge."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ingestion.pipeline.run import task_execute
from kb import storage
from kb.models import Build, Chunk, Document, IndexVersion, KnowledgeBase, Revision
from kb.services.documents import document_create, document_delete, revision_create
from kb.services.retention import retention_collect
from retrieval.extracted import cache_clear
from retrieval.principals import api_key_create
from retrieval.search.context import Expansion, _joined, _Piece, hit_contexts
from retrieval.search.hits import Hit
from tests.retrieval.factories import api, build, publish, search
from textkit import extract as extractors
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)

SENTENCES = [
    f"Sentence number {i} talks about the {word} policy of the office."
    for i, word in enumerate(
        [
            "parking",
            "lunch",
            "travel",
            "badge",
            "printer",
            "kettle",
            "laptop",
            "holiday",
            "pension",
            "locker",
            "bicycle",
            "shuttle",
        ]
    )
]


@pytest.fixture
def small_chunks(kb: KnowledgeBase) -> KnowledgeBase:
    """Chunks of about three sentences, each carrying the previous one's last sentence."""
    IndexVersion.objects.filter(kb=kb).update(chunk_size=200, chunk_overlap=70)
    kb.refresh_from_db()
    return kb


@pytest.fixture
def key(kb: KnowledgeBase) -> str:
    return api_key_create(tenant=kb.tenant, name="agent")[1]


def upload_markdown(kb: KnowledgeBase, key: str, text: str) -> Revision:
    stored = storage.store_bytes(text.encode())
    document = Document.objects.filter(kb=kb, key=key).first()
    if document is not None:
        return revision_create(
            document=document,
            stored=stored,
            media_type=extractors.TEXT_MARKDOWN,
            original_name=f"{key}.md",
        )
    return document_create(
        kb=kb,
        key=key,
        title=key.title(),
        stored=stored,
        media_type=extractors.TEXT_MARKDOWN,
        original_name=f"{key}.md",
    )


def extracted_of(built: Build) -> str:
    return extractors.Extracted.from_json(storage.read_text(built.text_path)).text()


def hit_for(key: str, body: dict[str, Any], chunk_id: int | None = None) -> dict[str, Any]:
    response = search(api(key), {"kb": "handbook", "mode": "keyword", **body})
    assert response.status_code == 200, response.content
    hits = response.json()["hits"]
    assert hits
    return next(h for h in hits if chunk_id is None or h["chunk_id"] == chunk_id)


def test_neighbours_come_from_the_hits_build_as_one_passage_without_repeated_overlap(
    small_chunks: KnowledgeBase, key: str
) -> None:
    built = publish(small_chunks, "office", " ".join(SENTENCES))
    chunks = list(Chunk.objects.filter(build=built).order_by("ordinal"))
    assert len(chunks) >= 5
    # the chunker carried an overlap: neighbouring chunks share text
    starts, ends = chunks[2].char_start, chunks[1].char_end
    assert starts is not None and ends is not None and starts < ends
    text = extracted_of(built)
    middle = chunks[2]

    hit = hit_for(key, {"query": "laptop", "neighbors": 1}, middle.pk)

    context = hit["context"]
    assert context["chunks"] == [1, 3]
    assert context["unavailable"] is None
    assert context["text"] == text[chunks[1].char_start : chunks[3].char_end]
    assert context["text"][context["hit_start"] : context["hit_end"]] == hit["text"]
    for sentence in SENTENCES:  # each sentence once, though two chunks hold the overlap
        assert context["text"].count(sentence) <= 1
    assert hit["build_id"] == built.pk and hit["document_id"] == built.document_id


def test_neighbours_stop_at_the_documents_ends(small_chunks: KnowledgeBase, key: str) -> None:
    built = publish(small_chunks, "office", " ".join(SENTENCES))
    last = Chunk.objects.filter(build=built).order_by("-ordinal").first()
    assert last is not None

    hit = hit_for(key, {"query": "shuttle", "neighbors": 3}, last.pk)

    assert hit["context"]["chunks"] == [max(0, last.ordinal - 3), last.ordinal]
    assert hit["context"]["hit_end"] == len(hit["context"]["text"])


def test_a_section_passage_keeps_to_its_headings_and_its_size(
    small_chunks: KnowledgeBase, key: str
) -> None:
    before = " ".join(SENTENCES[:4])
    section = " ".join(SENTENCES[4:])
    revision = upload_markdown(
        small_chunks,
        "manual",
        f"# Manual\n\n## Before\n\n{before}\n\n## Equipment\n\n{section}\n\n## After\n\n{before}",
    )
    built = build(revision)
    chunks = list(Chunk.objects.filter(build=built).order_by("ordinal"))
    in_section = [c for c in chunks if c.heading_path.endswith("Equipment")]
    assert len(in_section) >= 3
    target = in_section[1]

    hit = hit_for(key, {"query": target.text.split()[4], "expand": "section"}, target.pk)

    context = hit["context"]
    assert context["chunks"] == [in_section[0].ordinal, in_section[-1].ordinal]
    text = extracted_of(built)
    assert context["text"] == text[in_section[0].char_start : in_section[-1].char_end]
    assert context["text"][context["hit_start"] : context["hit_end"]] == hit["text"]
    assert "Before" not in context["text"] and "After" not in context["text"]


def test_a_section_passage_stops_at_the_size_limit(
    small_chunks: KnowledgeBase, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from retrieval.search import context as context_module

    built = publish(small_chunks, "office", " ".join(SENTENCES))
    chunks = list(Chunk.objects.filter(build=built).order_by("ordinal"))
    monkeypatch.setattr(context_module, "SECTION_MAX_CHARS", 300)
    target = chunks[2]

    hit = hit_for(key, {"query": "laptop", "expand": "section"}, target.pk)

    context = hit["context"]
    assert len(context["text"]) <= 300
    first, last = context["chunks"]
    assert first <= target.ordinal <= last and (first, last) != (0, len(chunks) - 1)
    assert context["text"][context["hit_start"] : context["hit_end"]] == hit["text"]


def test_the_context_of_every_hit_is_one_statement(small_chunks: KnowledgeBase, key: str) -> None:
    publish(small_chunks, "office", " ".join(SENTENCES))
    publish(small_chunks, "annex", " ".join(reversed(SENTENCES)))
    body = {"kb": "handbook", "query": "policy office", "mode": "keyword", "top_k": 6}
    client = api(key)
    assert search(client, body).status_code == 200  # records last_used_at (once a minute)

    with CaptureQueriesContext(connection) as plain:
        assert search(client, body).status_code == 200
    with CaptureQueriesContext(connection) as expanded:
        response = search(client, {**body, "neighbors": 2})

    hits = response.json()["hits"]
    assert len(hits) == 6 and {h["document_key"] for h in hits} == {"office", "annex"}
    assert all(h["context"]["text"] for h in hits)
    extra = [q["sql"] for q in expanded.captured_queries[len(plain.captured_queries) :]]
    assert len(expanded.captured_queries) == len(plain.captured_queries) + 1, extra
    assert "FROM unnest" in extra[0]


def test_a_hit_whose_build_retention_collected_keeps_no_context_and_says_so(
    small_chunks: KnowledgeBase,
) -> None:
    built = publish(small_chunks, "office", " ".join(SENTENCES))
    chunk = Chunk.objects.filter(build=built).order_by("ordinal")[1]
    hit = Hit(
        chunk_id=chunk.pk,
        score=1.0,
        text=chunk.text,
        ordinal=chunk.ordinal,
        document_key="office",
        document_title="Office",
        revision=1,
        build_id=built.pk,
    )
    Build.objects.filter(pk=built.pk).update(collected_at=timezone.now())

    [context] = hit_contexts([hit], expansion=Expansion(neighbors=1)).values()

    assert context.text is None and context.unavailable == "collected"


def test_without_offsets_neighbours_are_joined_without_their_overlap() -> None:
    pieces = [
        _Piece(0, "One fish. Two fish.", None, None),
        _Piece(1, "Two fish. Red fish.", None, None),
        _Piece(2, "Blue fish.", None, None),
    ]
    text, hit_start = _joined(pieces, 1)
    assert text == "One fish. Two fish. Red fish.\n\nBlue fish."
    assert text[hit_start : hit_start + len(pieces[1].text)] == pieces[1].text


def test_highlights_mark_english_stems_and_not_stop_words(kb: KnowledgeBase, key: str) -> None:
    publish(kb, "bikes", "The bicycles are parked where the parking signs say so.")

    hit = hit_for(key, {"query": "the bicycle parks"})

    marked = [hit["text"][start:end] for start, end in hit["highlights"]]
    assert marked == ["bicycles", "parked", "parking"]


def test_highlights_mark_chinese_words(kb: KnowledgeBase, key: str) -> None:
    publish(kb, "zh", "员工可以在每年一月申请停车许可证。食堂早上八点开门。")

    hit = hit_for(key, {"query": "停车许可证"})

    marked = {hit["text"][start:end] for start, end in hit["highlights"]}
    assert marked and all(m in "停车许可证" for m in marked)
    assert "".join(sorted(marked, key=hit["text"].index)) == "停车许可证"


def test_a_citation_made_on_revision_1_opens_its_text_after_revision_2_and_410_after_purge(
    kb: KnowledgeBase, key: str, settings: Any
) -> None:
    first = publish(kb, "leave", "Intro.\n\nParental leave is sixteen weeks at full pay.")
    hit = hit_for(key, {"query": "parental leave"})
    citation = hit["citation"]
    assert citation["revision"] == 1 and citation["document_id"] == first.document_id
    assert (citation["start"], citation["end"]) == (hit["char_start"], hit["char_end"])
    client = api(key)

    publish(kb, "leave", "Parental leave is twenty weeks, the first ten at full pay.")
    assert hit_for(key, {"query": "parental leave"})["revision"] == 2

    response = client.get(citation["url"])
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["text"] == hit["text"]
    assert body["revision"] == 1 and body["live"] is False
    assert (body["start"], body["end"]) == (citation["start"], citation["end"])

    settings.DELETE_PURGE_DELAY_SECONDS = 0
    document_delete(document_id=first.document_id)
    assert client.get(citation["url"]).json()["error"] == "deleted"
    purge = IngestionTask.objects.get(kind=IngestionTask.Kind.DELETE)
    IngestionTask.objects.filter(pk=purge.pk).update(available_at=None)
    assert task_execute(task_id=purge.pk, worker_id="test").startswith("purged")

    response = client.get(citation["url"])
    assert response.status_code == 410
    assert response.json()["error"] == "purged" and "purged" in response.json()["detail"]


def test_a_revision_past_retention_is_gone(kb: KnowledgeBase, key: str) -> None:
    first = publish(kb, "leave", "Parental leave is sixteen weeks at full pay.")
    publish(kb, "leave", "Parental leave is twenty weeks.")
    long_ago = timezone.now() - timedelta(days=kb.retention_days + 1)
    Build.objects.filter(pk=first.pk).update(updated_at=long_ago)
    assert retention_collect() > 0

    response = api(key).get(f"/api/v1/documents/{first.document_id}/revisions/1/text")

    assert response.status_code == 410 and response.json()["error"] == "not_retained"
    latest = api(key).get(f"/api/v1/documents/{first.document_id}/revisions/2/text")
    assert latest.status_code == 200 and latest.json()["live"] is True


def test_a_key_without_the_documents_group_gets_the_same_404_as_for_nothing(
    kb: KnowledgeBase,
) -> None:
    secret = publish(kb, "payroll", "Salaries are paid on the last day.", groups=("finance",))
    _, plain = api_key_create(tenant=kb.tenant, name="plain")
    _, finance = api_key_create(tenant=kb.tenant, name="finance", access_groups=["finance"])
    path = f"/api/v1/documents/{secret.document_id}/revisions/1/text?start=0&end=8"

    assert api(finance).get(path).json()["text"] == "Salaries"
    refused = api(plain).get(path)
    missing = api(plain).get(f"/api/v1/documents/{secret.document_id + 999}/revisions/1/text")
    assert refused.status_code == missing.status_code == 404
    assert "Salaries" not in refused.content.decode()
    assert refused.json()["error"] == missing.json()["error"]
    assert api(finance).get(path.replace("revisions/1", "revisions/7")).status_code == 404


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("start=-1", "start"),
        ("start=abc", "start"),
        ("end=x", "end"),
        ("start=10&end=5", "end"),
        ("start=0&end=100000", "end"),
        ("start=100000", "start"),
        (f"start=0&end={2**40}", "end"),
    ],
)
def test_bad_spans_are_a_400_naming_the_parameter(
    kb: KnowledgeBase, key: str, query: str, parameter: str
) -> None:
    built = publish(kb, "short", "A short text of some forty characters.")

    response = api(key).get(f"/api/v1/documents/{built.document_id}/revisions/1/text?{query}")

    assert response.status_code == 400, response.content
    assert parameter in response.json()["detail"]


def test_long_reads_come_in_pages(
    kb: KnowledgeBase, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from retrieval import citations

    monkeypatch.setattr(citations, "TEXT_MAX_SPAN", 10)
    built = publish(kb, "short", "A short text of some forty characters.")
    path = f"/api/v1/documents/{built.document_id}/revisions/1/text"

    first = api(key).get(path).json()
    second = api(key).get(f"{path}?start={first['end']}").json()
    assert (first["start"], first["end"], first["length"]) == (0, 10, 38)
    assert first["text"] + second["text"] == "A short text of some"
    assert api(key).get(f"{path}?start=0&end=11").status_code == 400


def test_a_text_missing_from_storage_is_gone_with_a_reason(kb: KnowledgeBase, key: str) -> None:
    built = publish(kb, "short", "A short text of some forty characters.")
    cache_clear()
    storage.absolute_path(built.text_path).unlink()

    response = api(key).get(f"/api/v1/documents/{built.document_id}/revisions/1/text")

    assert response.status_code == 410 and response.json()["error"] == "text_missing"
    # search still answers, its passage built from the chunks' own texts
    hit = hit_for(key, {"query": "forty characters", "neighbors": 1})
    assert hit["context"]["text"] == hit["text"]


def test_every_hit_carries_what_a_citation_needs(kb: KnowledgeBase, key: str) -> None:
    built = publish(kb, "kitchen", "The kettle is descaled on Fridays.")

    for mode in ("keyword", "vector", "hybrid"):
        hit = hit_for(key, {"query": "kettle descaled", "mode": mode})
        assert hit["document_id"] == built.document_id and hit["document_key"] == "kitchen"
        assert (hit["revision"], hit["build_id"]) == (1, built.pk)
        assert "heading_path" in hit and "location" in hit
        assert hit["citation"]["url"] == (
            f"/api/v1/documents/{built.document_id}/revisions/1/text"
            f"?start={hit['char_start']}&end={hit['char_end']}"
        )
        assert "context" not in hit  # only when asked for


def test_neighbors_and_expand_together_are_refused(kb: KnowledgeBase, key: str) -> None:
    body = {"kb": "handbook", "query": "x", "neighbors": 1, "expand": "section"}
    response = search(api(key), body)
    assert response.status_code == 400 and "expand" in response.json()["detail"]
    response = search(api(key), {"kb": "handbook", "query": "x", "neighbors": 4})
    assert response.status_code == 400 and "neighbors" in response.json()["detail"]


def test_the_schema_lists_the_text_operation_and_the_new_fields() -> None:
    from django.test import Client

    schema = Client().get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/documents/{document_id}/revisions/{revision}/text"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"start", "end", "revision"}
    assert {"200", "400", "404", "410", "503"} <= set(operation["responses"])
    components = schema["components"]["schemas"]
    assert {"document_id", "highlights", "citation", "context"} <= set(
        components["HitOutput"]["properties"]
    )
    assert {"neighbors", "expand"} <= set(components["SearchInputRequest"]["properties"])
    assert set(components["ContextOutput"]["properties"]) == {
        "text",
        "hit_start",
        "hit_end",
        "chunks",
        "unavailable",
    }
