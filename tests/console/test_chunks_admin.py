"""Chunks in the admin: a build's page shows the parsed text with its chunk boundaries and every
chunk (ordinal, heading path, tokens, characters, range, overlap); the chunk list searches and
filters. Scoped by tenant and access group; the vectors are never read."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ingestion.build_text import chunk_spans
from kb import storage
from kb.models import Build, Chunk, IndexVersion, KnowledgeBase
from kb.services.documents import document_create
from tests.console.admin_world import MARK_HR, World, build_world, staff
from tests.retrieval.factories import build as run_build
from tests.retrieval.factories import publish

pytestmark = pytest.mark.django_db

RULES = "\n\n".join(
    f"Rule {i}: trains and buses are reimbursed in second class, receipts within {i} days."
    for i in range(1, 5)
)
LONG = " ".join(f"Fare rule {i} holds." for i in range(30))
HANDBOOK = f"# Travel\n\n{RULES}\n\n{LONG}\n\n## Hotels\n\nHotels are booked through the desk."


@pytest.fixture
def world(db: None) -> World:
    return build_world()


def _small_chunks(kb: KnowledgeBase) -> None:
    assert kb.active_index_version_id is not None
    IndexVersion.objects.filter(pk=kb.active_index_version_id).update(
        chunk_size=200, chunk_overlap=40
    )


def test_a_builds_page_shows_its_parsed_text_and_chunk_boundaries(
    kb: KnowledgeBase, admin_user: User
) -> None:
    _small_chunks(kb)
    revision = document_create(
        kb=kb,
        key="travel",
        title="Travel",
        stored=storage.store_bytes(HANDBOOK.encode()),
        media_type="text/markdown",
        original_name="travel.md",
    )
    build = run_build(revision)
    chunks = list(Chunk.objects.filter(build=build).order_by("ordinal"))
    assert len(chunks) > 3
    client = Client()
    client.force_login(admin_user)

    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/admin/kb/chunk/of-build/{build.pk}/")

    assert response.status_code == 200
    page = response.content.decode()
    assert response.context["parsed"].title == "Travel"
    assert "Hotels are booked through the desk." in page
    for chunk in chunks:  # a marker where each chunk starts, and its row
        assert f'href="#chunk-{chunk.ordinal}"' in page and f'id="chunk-{chunk.ordinal}"' in page
    assert "Travel › Hotels" in page
    spans = list(response.context["page"].object_list)
    assert all(s.start is not None for s in spans)
    assert [s.size for s in spans] == [len(c.text) for c in chunks]
    assert any(s.overlap for s in spans[1:]), "consecutive chunks overlap"
    # the chunks were read without their vectors
    chunk_reads = [q["sql"] for q in queries.captured_queries if 'FROM "kb_chunk"' in q["sql"]]
    assert chunk_reads and not any('"embedding"' in sql for sql in chunk_reads)


def test_chunk_spans_find_each_chunk_after_the_previous_one() -> None:
    text = "alpha beta gamma. alpha beta gamma. delta"
    chunks = [Chunk(ordinal=0, text="alpha beta gamma."), Chunk(ordinal=1, text="gamma. alpha")]
    chunks.append(Chunk(ordinal=2, text="not in the text"))

    spans = chunk_spans(chunks, text)

    assert [(s.start, s.end, s.overlap) for s in spans] == [
        (0, 17, 0),
        (11, 23, 6),
        (None,) * 2 + (0,),
    ]


def test_the_chunk_list_searches_text_and_filters_by_build(
    kb: KnowledgeBase, admin_user: User
) -> None:
    travel = publish(kb, "travel", "Trains are reimbursed in second class.")
    publish(kb, "hotels", "Hotels are booked through the travel desk.")
    client = Client()
    client.force_login(admin_user)

    searched = client.get("/admin/kb/chunk/", {"q": "booked"})
    filtered = client.get("/admin/kb/chunk/", {"build": str(travel.pk)})

    assert [c.document.key for c in searched.context["cl"].result_list] == ["hotels"]
    assert [c.document.key for c in filtered.context["cl"].result_list] == ["travel"]
    assert f"/admin/kb/chunk/of-build/{travel.pk}/" in filtered.content.decode()


def test_no_chunk_page_shows_hr_text_to_a_user_outside_hr(world: World) -> None:
    hr_build = Build.objects.filter(document=world.hr_doc).order_by("pk").first()
    assert hr_build is not None
    hr_chunk = Chunk.objects.filter(build=hr_build).first()
    assert hr_chunk is not None
    carol, harry = world.client("carol"), world.client("harry")

    for client, may in ((carol, False), (harry, True)):
        pages = [
            client.get(f"/admin/kb/chunk/of-build/{hr_build.pk}/"),
            client.get("/admin/kb/chunk/", {"q": "pay bands"}),
            client.get("/admin/kb/chunk/", {"build": str(hr_build.pk)}),
            client.get(f"/admin/kb/chunk/{hr_chunk.pk}/change/"),
        ]
        bodies = [p.content.decode().lower() for p in pages]
        assert any(MARK_HR in body for body in bodies) is may
        if not may:
            assert pages[0].status_code == 404
            assert pages[3].status_code == 302  # Django's answer for an id that does not exist


def test_viewing_chunks_takes_the_permission_to_view_builds(world: World) -> None:
    user = staff("nobody", "Content managers", world.tenant_b)
    user.groups.clear()
    user.is_staff = True
    user.save()
    client = Client()
    client.force_login(user)
    build = Build.objects.filter(document=world.open_doc).first()
    assert build is not None

    assert client.get("/admin/kb/chunk/").status_code == 403
    assert client.get(f"/admin/kb/chunk/of-build/{build.pk}/").status_code in (403, 404)
    # a content manager may (they view builds)
    assert world.client("carol").get(f"/admin/kb/chunk/of-build/{build.pk}/").status_code == 200


def test_the_build_list_and_the_document_page_link_each_build_to_its_chunks(
    kb: KnowledgeBase, admin_user: User
) -> None:
    build = publish(kb, "travel", "Trains are reimbursed in second class.")
    client = Client()
    client.force_login(admin_user)

    builds = client.get("/admin/kb/build/").content.decode()
    document = client.get(f"/admin/kb/document/{build.document_id}/change/").content.decode()

    for page in (builds, document):
        assert f'href="/admin/kb/chunk/of-build/{build.pk}/"' in page


def test_a_pdf_builds_chunks_say_which_pages_they_stand_on(
    kb: KnowledgeBase, admin_user: User
) -> None:
    from tests.textkit.extract.pdf_fixtures import make_pdf

    line = "Visitors sign in at the front desk and wear a badge at all times."
    revision = document_create(
        kb=kb,
        key="visitors",
        title="Visitors",
        stored=storage.store_bytes(make_pdf([[line] * 3, [line.replace("badge", "lanyard")] * 3])),
        media_type="application/pdf",
        original_name="visitors.pdf",
    )
    built = run_build(revision)
    client = Client()
    client.force_login(admin_user)

    chunks = list(Chunk.objects.filter(build=built).order_by("ordinal"))
    assert chunks[0].location == {"unit": "page", "first": 1, "last": 1}
    assert chunks[-1].location == {"unit": "page", "first": len(chunks), "last": 2}
    page = client.get(f"/admin/kb/chunk/of-build/{built.pk}/").content.decode()
    assert '<td class="canon-where">page 1</td>' in page
    assert '<td class="canon-where">page 2</td>' in page or len(chunks) == 1
    first = chunks[0]
    detail = client.get(f"/admin/kb/chunk/{first.pk}/change/").content.decode()
    assert "page 1" in detail
    assert f"characters 0\u2013{first.char_end}" in detail and first.char_end == len(first.text)
