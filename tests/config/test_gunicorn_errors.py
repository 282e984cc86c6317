"""Issue 37, item 14: every error under /api/ is JSON, also the ones gunicorn answers itself
before Django sees the request (config/gunicorn.conf.py, `JsonErrorsWorker`). Against the
Procfile's real web process, with raw sockets: an HTTP client would not send these bytes."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.production_support import procfile_web

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def port(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The Procfile's web process, one worker of two threads."""
    with procfile_web(
        tmp_path_factory.mktemp("web"), CANON_WEB_WORKERS="1", CANON_WEB_THREADS="2"
    ) as (_, port):
        yield port


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> object:
        assert self.headers["content-type"] == "application/json", self
        return json.loads(self.body)


def send(port: int, request: bytes) -> Answer:
    """One request as raw bytes; the whole answer (gunicorn closes after a refusal)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(int(lines[0].split(" ")[1]), headers, body)


def request(path: str, *headers: bytes, method: bytes = b"POST") -> bytes:
    return (
        method
        + b" "
        + path.encode()
        + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + b"".join(header + b"\r\n" for header in headers)
        + b"Connection: close\r\n\r\n"
    )


def test_a_control_character_in_a_header_is_a_json_400(port: int) -> None:
    """The issue's request: gunicorn answered its HTML "Bad Request" page."""
    answer = send(
        port,
        request(
            "/api/v1/kbs/handbook/documents/",
            b"Authorization: Bearer canon_x_y",
            b"Idempotency-Key: abc\x01def",
            b"Content-Length: 0",
        ),
    )

    assert answer.status == 400
    assert answer.json() == {
        "error": "bad_request",
        "detail": "The request could not be read: the header IDEMPOTENCY-KEY holds a control "
        "character.",
    }
    assert answer.headers["content-length"] == str(len(answer.body))


def test_headers_and_request_lines_too_large_are_json_with_gunicorn_s_status(port: int) -> None:
    too_long = send(port, request("/api/v1/search?q=" + "x" * 5000))
    too_many = send(
        port,
        request("/api/v1/search", *(f"X-Extra-{i}: {i}".encode() for i in range(120))),
    )

    assert too_long.status == 414
    assert too_long.json() == {
        "error": "request_line_too_long",
        "detail": "The request could not be read: the request line is longer than this "
        "server reads.",
    }
    assert too_many.status == 431
    assert too_many.json()["error"] == "headers_too_large"  # type: ignore[index]


def test_the_compatibility_doors_get_their_own_shapes_where_the_path_is_known(port: int) -> None:
    """A bad Content-Length is refused after gunicorn has read the path: Dify's and OpenAI's
    shapes, as `retrieval.compat.middleware` words their other errors."""
    dify = send(port, request("/api/dify/retrieval", b"Content-Length: twelve"))
    openai = send(
        port,
        request("/api/openai/v1/vector_stores/handbook/search", b"Content-Length: twelve"),
    )

    assert dify.status == openai.status == 400
    assert dify.json() == {
        "error_code": 3001,
        "error_msg": "The request could not be read: the header CONTENT-LENGTH holds a value "
        "this server cannot read.",
    }
    error = openai.json()["error"]  # type: ignore[index]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        None,
        "bad_request",
    )


def test_outside_the_api_gunicorn_s_page_stays(port: int) -> None:
    answer = send(port, request("/admin/login/", b"Content-Length: twelve"))

    assert answer.status == 400
    assert answer.headers["content-type"] == "text/html"


def test_a_refused_header_line_is_not_repeated_in_the_answer(port: int) -> None:
    """A header line without its colon may be a credential; the answer names no part of it."""
    answer = send(port, request("/api/v1/kbs/", b"Authorization Bearer canon_abc_secretpart"))

    assert answer.status == 400
    assert b"secretpart" not in answer.body
    assert answer.json() == {
        "error": "bad_request",
        "detail": "The request could not be read: a header is not valid HTTP (a control "
        "character in its value, or a malformed line).",
    }
