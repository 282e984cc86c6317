"""Issue 25, item 2: Canon's filter language in search, per operator and compound, in vector,
keyword and hybrid mode, under the visibility rule (access groups, a document mid-revision),
and a 400 naming the place for a filter that cannot be applied."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from kb import storage
from kb.models import Document, KnowledgeBase
from kb.services.documents import document_create
from kb.services.metadata import metadata_field_save
from retrieval.principals import api_key_create
from retrieval.search import engine
from retrieval.search.lexical import bm25
from tests.retrieval.factories import api, build, search, upload

pytestmark = pytest.mark.django_db

MODES = ("keyword", "vector", "hybrid")


def add(
    kb: KnowledgeBase, key: str, metadata: dict[str, Any], groups: tuple[str, ...] = ()
) -> None:
    text = f"The {key} handbook policy page says what {key} staff should know."
    revision = document_create(
        kb=kb,
        key=key,
        title=key.replace("-", " ").title(),
        stored=storage.store_bytes(text.encode()),
        media_type="text/plain",
        original_name=f"{key}.txt",
        access_groups=groups,
        metadata=metadata,
    )
    build(revision)


@pytest.fixture
def library(kb: KnowledgeBase) -> KnowledgeBase:
    for name, kind in [
        ("department", "string"),
        ("year", "number"),
        ("valid_until", "date"),
        ("public", "boolean"),
        ("tags", "string_list"),
    ]:
        metadata_field_save(kb=kb, name=name, type=kind)
    add(
        kb,
        "hr-2023",
        {
            "department": "hr",
            "year": 2023,
            "valid_until": "2024-06-30",
            "public": True,
            "tags": ["policy", "leave"],
        },
    )
    add(
        kb,
        "finance-2024",
        {
            "department": "finance",
            "year": 2024,
            "valid_until": "2025-12-31",
            "public": False,
            "tags": ["expense"],
        },
    )
    add(
        kb,
        "finance-2025",
        {"department": "finance", "year": 2025.0, "tags": ["expense", "travel"]},
        groups=("finance-team",),
    )
    add(kb, "misc", {})
    # A revision 2 of finance-2024 uploaded but not built: search serves revision 1.
    upload(kb, "finance-2024", "Revision two, not built yet: handbook policy draft.")
    return kb


@pytest.fixture
def staff_key(library: KnowledgeBase) -> Client:
    _, key = api_key_create(tenant=library.tenant, name="staff")
    return api(key)


@pytest.fixture
def finance_key(library: KnowledgeBase) -> Client:
    _, key = api_key_create(tenant=library.tenant, name="finance", access_groups=["finance-team"])
    return api(key)


def found(client: Client, where: Any, mode: str) -> set[str]:
    body = {
        "kb": "handbook",
        "query": "handbook policy",
        "mode": mode,
        "top_k": 20,
        "filter": where,
    }
    response = search(client, body)
    assert response.status_code == 200, response.json()
    return {hit["document_key"] for hit in response.json()["hits"]}


def c(field: str, op: str, value: Any) -> dict[str, Any]:
    return {"field": field, "op": op, "value": value}


CASES = [
    (c("department", "eq", "finance"), {"finance-2024"}),
    (c("department", "ne", "hr"), {"finance-2024"}),
    (c("year", "gt", 2023), {"finance-2024"}),
    (c("year", "gte", 2023), {"hr-2023", "finance-2024"}),
    (c("year", "lt", 2024), {"hr-2023"}),
    (c("year", "lte", 2024.0), {"hr-2023", "finance-2024"}),
    (c("year", "eq", 2024), {"finance-2024"}),
    (c("department", "in", ["hr", "legal"]), {"hr-2023"}),
    (c("department", "nin", ["hr"]), {"finance-2024"}),
    (c("tags", "contains", "leave"), {"hr-2023"}),
    (c("tags", "in", ["leave", "expense"]), {"hr-2023", "finance-2024"}),
    (c("tags", "nin", ["leave"]), {"finance-2024"}),
    (c("tags", "eq", ["leave", "policy"]), {"hr-2023"}),
    (c("department", "contains", "NAN"), {"finance-2024"}),
    (c("valid_until", "lt", "2025-01-01"), {"hr-2023"}),
    (c("valid_until", "gte", "2025-01-01T10:00:00Z"), {"finance-2024"}),
    (c("valid_until", "exists", True), {"hr-2023", "finance-2024"}),
    (c("valid_until", "exists", False), {"misc"}),
    (c("public", "eq", True), {"hr-2023"}),
    (c("public", "ne", True), {"finance-2024"}),
    (c("title", "contains", "misc"), {"misc"}),
    (c("department", "starts_with", "fin"), {"finance-2024"}),
    (c("key", "ends_with", "-2023"), {"hr-2023"}),
    (c("department", "starts_with", "Fin"), set()),  # case-sensitive
    (c("key", "in", ["misc", "hr-2023"]), {"misc", "hr-2023"}),
    (c("content_type", "eq", "text/plain"), {"hr-2023", "finance-2024", "misc"}),
    # the live revision, not the one on its way
    (c("revision", "eq", 1), {"hr-2023", "finance-2024", "misc"}),
    (c("revision", "eq", 2), set()),
    (
        {"and": [c("year", "gte", 2023), {"not": c("department", "eq", "hr")}]},
        {"finance-2024"},
    ),
    (
        {"or": [c("year", "eq", 2023), {"not": c("department", "exists", True)}]},
        {"hr-2023", "misc"},
    ),
    ({"not": c("department", "ne", "hr")}, {"hr-2023", "misc"}),
    ({"not": {"or": [c("year", "lt", 2024), c("year", "gt", 2024)]}}, {"finance-2024", "misc"}),
    # eq on a list field is containment: holds every string given, maybe more
    (c("tags", "eq", "leave"), {"hr-2023"}),
    (c("tags", "eq", ["policy"]), {"hr-2023"}),
    # issue 37, item 10: the fields every hit carries, as a client sees them in an answer
    (c("document_key", "eq", "misc"), {"misc"}),
    (c("document_key", "starts_with", "finance"), {"finance-2024"}),
    (c("kb", "eq", "handbook"), {"hr-2023", "finance-2024", "misc"}),
    (c("kb", "ne", "handbook"), set()),
    # dates as Unix seconds (OpenAI's attributes, Dify's time metadata): the UTC date
    (c("valid_until", "lt", 1735689600), {"hr-2023"}),  # 2025-01-01T00:00:00Z
    (c("valid_until", "eq", "1719748800"), {"hr-2023"}),  # 2024-06-30T12:00:00Z, as text
    (c("created", "gte", 946684800), {"hr-2023", "finance-2024", "misc"}),
    # numbers as text (Dify's workflow variables, agents)
    (c("year", "gte", "2024"), {"finance-2024"}),
    (c("year", "in", ["2023", 2025]), {"hr-2023"}),
]


def keyword_path(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """The keyword leg ranks a narrow filter's chunks filter-first; a wider one (more than
    FILTER_FIRST_MAX chunks, which these small knowledge bases never reach) best-first, a short
    read retried with the filter applied to the candidates. A hybrid search shares the first
    path's probe with its vector leg, which then ranks the filter's chunks exactly; on the
    second it walks the HNSW index. `best-first` makes every filter take the second path, from
    a first read so shallow that the retry runs too."""
    monkeypatch.setattr(bm25, "FILTER_FIRST_MAX", 5000 if path == "filter-first" else -1)
    if path == "best-first":  # read one posting a term first: short, so retried filtered
        monkeypatch.setattr(settings, "KEYWORD_CANDIDATES", 1)


PATHS = ("filter-first", "best-first")


@pytest.mark.parametrize("mode", MODES)
def test_each_operator_and_compound(
    staff_key: Client, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One knowledge base for all the cases (building it is the slow part).
    for path in PATHS:
        keyword_path(monkeypatch, path)
        for where, expected in CASES:
            assert found(staff_key, where, mode) == expected, (path, where)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("mode", MODES)
def test_a_filter_only_narrows_what_the_key_may_read(
    staff_key: Client,
    finance_key: Client,
    mode: str,
    path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keyword_path(monkeypatch, path)
    where = c("department", "eq", "finance")
    assert found(staff_key, where, mode) == {"finance-2024"}
    assert found(finance_key, where, mode) == {"finance-2024", "finance-2025"}
    # a filter aimed at the restricted document tells the other key nothing
    assert found(staff_key, c("tags", "contains", "travel"), mode) == set()


@pytest.mark.parametrize("path", PATHS)
def test_a_filtered_search_returns_top_k_when_enough_match(
    kb: KnowledgeBase, staff_key: Client, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyword_path(monkeypatch, path)
    for n in range(12):
        add(kb, f"note-{n}", {"department": "hr" if n % 4 == 0 else "ops"})
    for mode in MODES:
        body = {
            "kb": "handbook",
            "query": "handbook policy",
            "mode": mode,
            "top_k": 3,
            "filter": c("department", "eq", "hr"),
        }
        hits = search(staff_key, body).json()["hits"]
        assert len(hits) == 3, mode
        keys = {hit["document_key"] for hit in hits}
        assert keys <= {"note-0", "note-4", "note-8", "hr-2023"}, mode


@pytest.mark.parametrize("path", PATHS)
def test_a_vector_search_under_a_narrow_filter_ranks_its_chunks_without_walking_the_index(
    staff_key: Client, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B15: with one document in 1,000 visible, the HNSW walk gave up before the filter's
    chunks were probed (vector 0.1 %: 2.1-2.3x unfiltered). Now the probe comes first; a filter
    too wide for it (`best-first` here) walks the index as before. The answer is the same."""
    keyword_path(monkeypatch, path)
    walks: list[int] = []
    walk = engine.approximate_rows

    def counted(*args: Any) -> Any:
        walks.append(1)
        return walk(*args)

    monkeypatch.setattr(engine, "approximate_rows", counted)

    assert found(staff_key, c("department", "eq", "finance"), "vector") == {"finance-2024"}
    assert len(walks) == (0 if path == "filter-first" else 1)
    walks.clear()
    body = {"kb": "handbook", "query": "handbook policy", "mode": "vector", "top_k": 3}
    assert len(search(staff_key, body).json()["hits"]) == 3
    assert len(walks) == 1  # no filter: the walk, in one statement


BAD = [
    (c("colour", "eq", "red"), "filter.field", "Unknown field"),
    (c("year", "eq", "twenty"), "filter.value", "number"),
    (c("year", "eq", "1e400"), "filter.value", "beyond"),
    (c("valid_until", "gt", 10**20), "filter.value", "Unix time"),
    (c("valid_until", "gt", "soon"), "filter.value", "YYYY-MM-DD"),
    (c("year", "contains", 2), "filter.op", "does not apply"),
    (c("department", "like", "h%"), "filter.op", "Unknown operator"),
    (c("department", "in", []), "filter.value", "list of 1 to"),
    (c("valid_until", "lt", "last week"), "filter.value", "YYYY-MM-DD"),
    (c("public", "exists", "yes"), "filter.value", "true or false"),
    ({"and": [c("year", "eq", 1), c("colour", "eq", 1)]}, "filter.and[1].field", "Unknown"),
    ({"and": []}, "filter.and", "non-empty list"),
    ({"and": [c("year", "eq", 1)], "or": []}, "filter", "stands alone"),
    ({"field": "year", "op": "eq"}, "filter.value", "Give a value"),
    ({"field": "year", "op": "eq", "value": 1, "x": 2}, "filter", "Unknown key"),
    ("year = 2024", "filter", "JSON object"),
    (
        {"not": {"not": {"not": {"not": {"not": c("year", "eq", 1)}}}}},
        "filter.not.not.not.not.not",
        "nest at most 5",
    ),
    ({"or": [c("year", "eq", n) for n in range(51)]}, "filter.or[50]", "at most 50"),
]


def test_a_filter_that_cannot_be_applied_is_a_400_naming_the_place(staff_key: Client) -> None:
    for where, place, words in BAD:
        response = search(staff_key, {"kb": "handbook", "query": "policy", "filter": where})
        assert response.status_code == 400, where
        [message] = response.json()["detail"]["filter"]
        assert message.startswith(f"{place}:") and words in message, message


def test_a_filter_on_document_id_finds_the_document(
    library: KnowledgeBase, staff_key: Client
) -> None:
    """Issue 37, item 10: `document_id` as every hit carries it."""
    ids = dict(Document.objects.filter(kb=library).values_list("key", "pk"))

    assert found(staff_key, c("document_id", "eq", ids["misc"]), "hybrid") == {"misc"}
    assert found(staff_key, c("document_id", "in", [ids["hr-2023"], 10**12]), "keyword") == {
        "hr-2023"
    }
    assert found(staff_key, c("document_id", "ne", ids["misc"]), "vector") == {
        "hr-2023",
        "finance-2024",
    }


def test_the_readme_names_the_limits_the_language_keeps() -> None:
    """Issue 37, item 13: the README names each limit, as the code keeps it."""
    from pathlib import Path

    from retrieval.api.serializers import MAX_FILTER_CHARS
    from retrieval.filters import MAX_CONDITIONS, MAX_DEPTH
    from retrieval.filters.language import MAX_IN_VALUES

    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())

    assert f"{MAX_DEPTH} levels of objects, the outermost counting as one" in readme
    assert f"at most {MAX_DEPTH - 1} `and` / `or` / `not` around a condition" in readme.replace(
        "four", "4"
    )
    assert f"{MAX_CONDITIONS} conditions" in readme
    assert f"{MAX_IN_VALUES} values in one `in` or `nin`" in readme
    assert f"{MAX_FILTER_CHARS:,} characters of JSON" in readme
    assert "`eq` is containment" in readme and "`in` is overlap" in readme
