"""Hostile input on every API path, with DEBUG off and on: a 4xx in the API's JSON error shape,
never a 500 (issue 14, item 4). The operations come from the URL resolver (tests/retrieval/
routes.py), so a new view is walked without being listed here; the client does not re-raise,
so an unhandled error shows as the 500 it would be."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

from kb.models import KnowledgeBase
from retrieval.api.parsers import MAX_JSON_BYTES, MAX_JSON_DEPTH, json_problem
from retrieval.principals import api_key_create
from tests.retrieval.factories import (
    calibration_of,
    publish,
    question_set_with_run,
    source_with_run,
)
from tests.retrieval.routes import Operation, api_operations, call, error_of

pytestmark = pytest.mark.django_db

JSON = "application/json"
SEARCH = {"kb": "handbook", "query": "refunds", "mode": "keyword"}


@dataclass(frozen=True)
class Hostile:
    """One hostile request: a body, a query string, or a path parameter."""

    name: str
    body: bytes | str = b""
    content_type: str = JSON
    query: str = ""
    params: dict[str, str] = field(default_factory=dict)


def _json(**fields: Any) -> str:
    return json.dumps({**SEARCH, **fields})


def _raw_multipart(*parts: tuple[bytes, bytes]) -> bytes:
    """A multipart body from (Content-Disposition params, content) byte pairs."""
    body = b""
    for disposition, content in parts:
        body += b"--" + BOUNDARY.encode() + b"\r\nContent-Disposition: form-data; " + disposition
        body += b"\r\n\r\n" + content + b"\r\n"
    return body + b"--" + BOUNDARY.encode() + b"--\r\n"


def _form(charset: str = "", **fields: Any) -> tuple[bytes, str]:
    fields.setdefault("file", SimpleUploadedFile("note.txt", b"A note."))
    fields.setdefault("key", "hostile")
    content_type = MULTIPART_CONTENT + (f"; charset={charset}" if charset else "")
    return encode_multipart(BOUNDARY, fields), content_type


DEEP = "[" * 5000 + "]" * 5000
HOSTILE: list[Hostile] = [
    # JSON bodies
    Hostile("deep array", DEEP),
    Hostile("deep object", '{"a":' * 5000 + "1" + "}" * 5000),
    Hostile("deep metadata", _json()[:-1] + ', "metadata": ' + '{"a":' * 5000 + "1" + "}" * 5001),
    Hostile(
        "just too deep",
        _json(metadata=json.loads('{"a":' * MAX_JSON_DEPTH + "1" + "}" * MAX_JSON_DEPTH)),
    ),
    Hostile("surrogate in metadata value", _json()[:-1] + ', "metadata": {"a": "\\ud800"}}'),
    Hostile("surrogate as metadata key", _json()[:-1] + ', "metadata": {"\\udc00": 1}}'),
    Hostile("surrogate in query", _json()[:-1].replace("refunds", "\\ud800") + "}"),
    Hostile("surrogate in kb", _json()[:-1].replace("handbook", "\\udbff") + "}"),
    Hostile("surrogate in mode", _json()[:-1].replace("keyword", "\\ud800") + "}"),
    Hostile("surrogate in document_keys", _json()[:-1] + ', "document_keys": ["\\ud800"]}'),
    Hostile("surrogate in as_of", _json()[:-1] + ', "as_of": "\\ud800"}'),
    Hostile("surrogate as a top-level key", '{"\\ud800": 1}'),
    Hostile("NUL in query", _json(query="re\x00funds")),
    Hostile("NUL in metadata value", _json(metadata={"a": "\x00"})),
    Hostile("NUL in metadata key", _json(metadata={"\x00": "a"})),
    Hostile("NUL in document_keys", _json(document_keys=["\x00"])),
    Hostile("huge body", _json(query="x" * (MAX_JSON_BYTES + 10))),
    Hostile("huge metadata", _json(metadata={f"k{i}": "v" * 100 for i in range(100)})),
    Hostile("invalid UTF-8", b'{"kb": "handbook", "query": "\xed\xa0\x80"}'),
    Hostile("invalid UTF-8 start", b"\xff\xfe{}"),
    Hostile("UTF-8 byte order mark", "\ufeff" + _json()),
    Hostile("UTF-16", _json().encode("utf-16"), content_type=JSON + "; charset=utf-16"),
    Hostile(
        "latin-1 charset", _json(query="caf\xe9").encode("latin-1"), JSON + "; charset=latin-1"
    ),
    Hostile("escape charset", '{"kb": "\\ud800"}', JSON + "; charset=raw_unicode_escape"),
    Hostile("byte codec charset", b"x", JSON + "; charset=bz2_codec"),
    Hostile("unknown charset", _json(), JSON + "; charset=no-such-charset"),
    Hostile("NaN", _json()[:-1] + ', "top_k": NaN}'),
    Hostile("Infinity", _json()[:-1] + ', "top_k": -Infinity}'),
    Hostile("huge integer", _json()[:-1] + ', "top_k": 1' + "0" * 5000 + "}"),
    Hostile("huge float", _json()[:-1] + ', "top_k": 1e999}'),
    Hostile("array", "[1, 2]"),
    Hostile("string", '"handbook"'),
    Hostile("number", "1"),
    Hostile("null", "null"),
    Hostile("empty", ""),
    Hostile("truncated", _json()[:-3]),
    Hostile("metadata as a list", _json(metadata=[1, 2])),
    # other content types
    Hostile("plain text", "kb=handbook", content_type="text/plain"),
    Hostile("xml", "<search/>", content_type="application/xml"),
    Hostile("form", "kb=handbook&query=x", content_type="application/x-www-form-urlencoded"),
    Hostile("no content type", _json(), content_type=""),
    Hostile("multipart to a JSON view", *_form()),
    # multipart forms
    Hostile("NUL in a form field", *_form(key="a\x00b")),
    Hostile("NUL in a form title", *_form(title="t\x00")),
    Hostile("surrogate in a form field", *_form("raw_unicode_escape", title="\\ud800")),
    Hostile(
        "surrogate in a file name",
        *_form("raw_unicode_escape", file=SimpleUploadedFile("a\\ud800.txt", b"x")),
    ),
    Hostile("NUL in a file name", *_form(file=SimpleUploadedFile("a\x00.txt", b"x"))),
    Hostile(
        "invalid UTF-8 in a form field",
        _raw_multipart(
            (b'name="key"', b"k\xed\xa0\x80"),
            (b'name="file"; filename="n\xff.txt"', b"text"),
        ),
        MULTIPART_CONTENT,
    ),
    Hostile("byte codec form", *_form("bz2_codec")),
    Hostile("broken multipart", b"--nope\r\n", MULTIPART_CONTENT),
    Hostile("multipart without boundary", b"x", "multipart/form-data"),
    # query strings
    Hostile("NUL in a query value", query="cursor=%00&limit=%00"),
    Hostile("NUL in a query name", query="%00=1"),
    Hostile("invalid UTF-8 in a query", query="cursor=%ED%A0%80&limit=%FF"),
    Hostile(
        "surrogate in a query",
        query="cursor=\\ud800",
        content_type="text/plain; charset=raw_unicode_escape",
    ),
    Hostile("byte codec query", query="cursor=x", content_type="text/plain; charset=bz2_codec"),
    Hostile("huge query value", query="limit=" + "9" * 5000 + "&cursor=" + "A" * 5000),
    Hostile("format", query="format=xml"),
    # path parameters
    Hostile("NUL in a path", params={"str": "%00", "int": "1"}),
    Hostile("invalid UTF-8 in a path", params={"str": "%ED%A0%80", "int": "1"}),
    Hostile("long path parameter", params={"str": "k" * 5000, "int": "9" * 5000}),
    Hostile("int beyond bigint", params={"str": "handbook", "int": str(2**64)}),
    Hostile("dots in a path", params={"str": "..%2F..", "int": "0"}),
]


@pytest.fixture
def key(kb: KnowledgeBase, settings: Any) -> str:
    settings.CANON_API_RATE = settings.CANON_API_WRITE_RATE = "100000/min"
    _, plaintext = api_key_create(
        tenant=kb.tenant, name="hostile", can_read_history=True, can_manage_sources=True
    )
    return plaintext


@pytest.fixture
def values(kb: KnowledgeBase, settings: Any, tmp_path: Path) -> dict[str, str]:
    """Values for every path parameter, naming things that exist and the key may read."""
    live = publish(kb, "refunds", "Refunds are possible within thirty days.")
    source, run = source_with_run(kb, tmp_path / "share", settings)
    question_set, evaluation = question_set_with_run(kb)
    calibration = calibration_of(question_set)
    return {
        "source_id": str(source.pk),
        "run_id": str(run.pk),
        "question_set_id": str(question_set.pk),
        "evaluation_id": str(evaluation.pk),
        "other_id": str(evaluation.pk),  # a run compared with itself: as good as any pair here
        "calibration_id": str(calibration.pk),
        "kb": "handbook",
        "chunk_id": str(live.chunks.get(ordinal=0).pk),
        "document_id": str(live.document_id),
        "revision": "1",
        "vector_store_id": "handbook",
    }


def _path(operation: Operation, values: dict[str, str], hostile: Hostile) -> str:
    chosen = dict(values)
    for name, converter in operation.params.items():
        if converter in hostile.params:
            chosen[name] = hostile.params[converter]
    return operation.path(chosen) + (f"?{hostile.query}" if hostile.query else "")


def assert_json_error_or_success(response: Any, label: str) -> None:
    assert response.status_code < 500, (label, response.status_code, response.content[:500])
    content_type = response.headers.get("Content-Type", "")
    if response.status_code >= 400:
        assert content_type.startswith(JSON), (label, response.status_code, content_type)
        error_of(response.request["PATH_INFO"], response.json())  # the door's shape
        assert "Traceback" not in response.content.decode("utf-8"), label


def send(client: Client, operation: Operation, path: str, hostile: Hostile) -> Any:
    kwargs: dict[str, Any] = {"headers": {"Idempotency-Key": f"hostile-{id(hostile)}-{path}"}}
    if hostile.body or hostile.content_type != JSON:
        kwargs.update(data=hostile.body, content_type=hostile.content_type)
    return call(client, operation, path, **kwargs)


@pytest.mark.parametrize("debug", [False, True], ids=["DEBUG=0", "DEBUG=1"])
def test_every_api_operation_answers_hostile_input_with_a_json_4xx(
    key: str, values: dict[str, str], settings: Any, debug: bool
) -> None:
    settings.DEBUG = debug
    client = Client(headers={"Authorization": f"Bearer {key}"}, raise_request_exception=False)
    operations = api_operations()
    assert {(op.method, op.name) for op in operations} >= {("post", "search"), ("get", "kb-list")}

    for operation in operations:
        for hostile in HOSTILE:
            path = _path(operation, values, hostile)
            response = send(client, operation, path, hostile)
            assert_json_error_or_success(response, f"{operation} {hostile.name}")


@pytest.mark.parametrize("debug", [False, True], ids=["DEBUG=0", "DEBUG=1"])
@pytest.mark.parametrize("hostile", [h for h in HOSTILE if h.body], ids=lambda h: h.name)
def test_search_refuses_every_hostile_body(
    key: str, values: dict[str, str], settings: Any, debug: bool, hostile: Hostile
) -> None:
    """Search reads a JSON body: none of these is a valid search (the ones that are valid JSON
    carry one bad value), so each must be refused, not answered and not crashed."""
    settings.DEBUG = debug
    client = Client(headers={"Authorization": f"Bearer {key}"}, raise_request_exception=False)

    response = client.generic(
        "POST", "/api/v1/search", hostile.body, content_type=hostile.content_type
    )

    assert 400 <= response.status_code < 500, (hostile.name, response.content[:300])
    assert response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (
            '{"kb": "handbook", "query": "x", "metadata": ' + '{"a":' * 5000 + "1" + "}" * 5001,
            400,
            "deeper than 32",
        ),
        (
            '{"kb": "handbook", "query": "x", "metadata": {"a": "\\ud800"}}',
            400,
            "$.metadata.a holds an unpaired surrogate",
        ),
        (
            '{"kb": "handbook", "query": "x", "metadata": {"\\ud800": 1}}',
            400,
            "A key of $.metadata holds an unpaired surrogate",
        ),
        (
            '{"kb": "handbook", "query": "x", "metadata": {"a b": ["\\u0000"]}}',
            400,
            '$.metadata["a b"][0] holds a NUL',
        ),
        ('{"kb": "handbook", "query": "' + "x" * MAX_JSON_BYTES + '"}', 413, "at most"),
        (  # issue 37, item 13: read as infinity, once refused only as "not valid JSON"
            '{"kb": "handbook", "query": "x", "filter": {"and": [{"field": "year", "op": "gt", '
            '"value": -1e400}]}}',
            400,
            "$.filter.and[0].value is a number beyond the range of a double",
        ),
    ],
    ids=["deep", "surrogate value", "surrogate key", "NUL", "too large", "1e400"],
)
def test_the_issue_bodies_are_refused_with_where_and_why(
    key: str, kb: KnowledgeBase, body: str, status: int, words: str
) -> None:
    client = Client(headers={"Authorization": f"Bearer {key}"}, raise_request_exception=False)

    response = client.post("/api/v1/search", body, content_type=JSON)

    assert response.status_code == status, response.content[:300]
    assert words in response.json()["detail"]


def test_a_search_nested_to_the_limit_is_answered(key: str, values: dict[str, str]) -> None:
    """32 levels of objects and arrays, counting the body itself: here the metadata filter
    nests 31 deep."""
    nested: Any = "x"
    for _ in range(MAX_JSON_DEPTH - 1):
        nested = {"a": nested}
    client = Client(headers={"Authorization": f"Bearer {key}"})

    response = client.post("/api/v1/search", _json(metadata=nested), content_type=JSON)

    assert response.status_code == 200, response.content
    assert response.json()["hits"] == []  # no document has that metadata
    assert json_problem({"m": nested}) is None
    assert json_problem({"m": {"m": nested}}) is not None, "one level more is refused"


def test_the_json_check_walks_without_recursion() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]

    assert json_problem(deep, max_depth=200_000) is None
    assert json_problem(deep) == "$" + "[0]" * MAX_JSON_DEPTH + " nests deeper than 32 levels."


def test_form_text_is_checked_in_every_field_and_file_name(key: str, kb: KnowledgeBase) -> None:
    client = Client(headers={"Authorization": f"Bearer {key}"}, raise_request_exception=False)
    url = "/api/v1/kbs/handbook/documents/"

    def post(body: bytes, content_type: str, idempotency_key: str) -> Any:
        headers = {"Idempotency-Key": idempotency_key}
        return client.generic("POST", url, body, content_type=content_type, headers=headers)

    named = post(*_form("raw_unicode_escape", file=SimpleUploadedFile("a\\ud800.txt", b"x")), "1")
    escaped = post(*_form("raw_unicode_escape", title="\\udfff"), "2")
    nul_name = post(*_form(unused="x\x00"), "3")

    assert (named.status_code, escaped.status_code) == (415, 415), "UTF-8 forms only"
    assert "UTF-8" in named.json()["detail"]
    assert nul_name.status_code == 400
    assert (
        nul_name.json()["detail"] == "Invalid text: the form field 'unused' holds a NUL character."
    )
    assert not kb.documents.exists()


def test_an_answer_that_echoes_a_surrogate_is_still_json() -> None:
    """The API's renderer escapes instead of failing, should a bad string ever get past the
    parsers into an answer (a validation message echoing the input, say)."""
    from retrieval.api.errors import ApiJSONRenderer

    rendered = ApiJSONRenderer().render({"detail": "bad \ud800", "kb": "食堂"})

    assert json.loads(rendered) == {"detail": "bad \ud800", "kb": "食堂"}
    assert ApiJSONRenderer().render({"kb": "食堂"}).decode() == '{"kb":"食堂"}', "UTF-8 as before"
