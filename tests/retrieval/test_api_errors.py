"""Every error under /api/ is JSON in the API's shape, with DEBUG off and on (issue 14, item 8):
unknown paths, wrong methods, server errors; in the test client and in a real server process."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from kb.models import KnowledgeBase
from retrieval.principals import api_key_create
from tests.conftest import database_url
from tests.retrieval.failing_urls import SECRET
from tests.retrieval.routes import METHODS, api_operations, call, error_of

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
DEBUG_MODES = pytest.mark.parametrize("debug", [False, True], ids=["DEBUG=0", "DEBUG=1"])


def assert_json_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response.headers["Content-Type"] == "application/json"
    body = response.json()
    # Canon's shape, or a compatibility door's (retrieval.compat; Dify's carries no code word).
    got, message = error_of(response.request["PATH_INFO"], body)
    assert got in (code, None), body
    return {"error": got, "detail": message}


@pytest.fixture
def client(kb: KnowledgeBase) -> Client:
    _, plaintext = api_key_create(tenant=kb.tenant, name="errors")
    return Client(headers={"Authorization": f"Bearer {plaintext}"}, raise_request_exception=False)


@DEBUG_MODES
@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/nothing",
        "/api/nothing",
        "/api",
        "/api/",
        "/api/v1/",
        "/api/v2/search",
        "/api/v1/kbs",  # no redirect to /api/v1/kbs/: API paths are exact
        "/api/v1/search/",
        "/api/v1/chunks/abc/explain",
        "/api/v1/documents/-1",
        "/api/v1/kbs/handbook/documents/extra",
    ],
)
@pytest.mark.parametrize("method", ["GET", "POST", "DELETE", "PUT"])
def test_an_unknown_api_path_is_a_json_404(
    client: Client, settings: Any, debug: bool, path: str, method: str
) -> None:
    settings.DEBUG = debug

    response = client.generic(method, path, b"{}", content_type="application/json")

    body = assert_json_error(response, 404, "not_found")
    assert body["detail"] == f"Nothing at {path}."
    assert b"urlpatterns" not in response.content and b"URLconf" not in response.content


@DEBUG_MODES
def test_every_api_route_is_exact_about_its_slash(
    client: Client, settings: Any, debug: bool
) -> None:
    settings.DEBUG = debug
    values = {
        "kb": "handbook",
        "chunk_id": 1,
        "document_id": 1,
        "revision": 1,
        "vector_store_id": "handbook",
        "source_id": 1,
        "run_id": 1,
        "question_set_id": 1,
        "evaluation_id": 1,
        "other_id": 1,
        "calibration_id": 1,
    }

    for operation in api_operations():
        path = operation.path(values)
        other = path[:-1] if path.endswith("/") else path + "/"
        response = call(client, operation, other)
        assert_json_error(response, 404, "not_found")


@DEBUG_MODES
def test_every_method_an_api_route_does_not_serve_is_a_json_405(
    client: Client, settings: Any, debug: bool
) -> None:
    settings.DEBUG = debug
    values = {
        "kb": "handbook",
        "chunk_id": 1,
        "document_id": 1,
        "revision": 1,
        "vector_store_id": "handbook",
        "source_id": 1,
        "run_id": 1,
        "question_set_id": 1,
        "evaluation_id": 1,
        "other_id": 1,
        "calibration_id": 1,
    }
    served: dict[str, set[str]] = {}
    for operation in api_operations():
        served.setdefault(operation.path(values), set()).add(operation.method)

    for path, methods in served.items():
        for method in set(METHODS) - methods:
            response = client.generic(method.upper(), path)
            body = assert_json_error(response, 405, "method_not_allowed")
            assert method.upper() in body["detail"]
            assert set(response.headers["Allow"].lower().replace(" ", "").split(",")) >= methods


class _Keep(logging.Handler):
    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _records_of(name: str) -> Iterator[list[logging.LogRecord]]:
    """What the logger `name` logs in the block, kept from pytest's own capture: a message with
    an unpaired surrogate cannot cross to pytest-xdist's controller in a test report."""
    handler = _Keep(logging.ERROR)
    logger = logging.getLogger(name)
    propagate, level = logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate, logger.level = False, logging.ERROR
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.propagate, logger.level = propagate, level


@DEBUG_MODES
@pytest.mark.parametrize(
    "path", ["/api/v1/_fail/drf", "/api/v1/_fail/function", "/api/v1/_fail/encoding"]
)
def test_a_server_error_is_a_json_500_without_its_traceback(
    settings: Any, debug: bool, path: str
) -> None:
    settings.DEBUG = debug
    settings.ROOT_URLCONF = "tests.retrieval.failing_urls"

    with _records_of("django.request") as records:
        response = Client(raise_request_exception=False).get(path)

    body = assert_json_error(response, 500, "server_error")
    assert SECRET not in response.content.decode()
    assert "Traceback" not in body["detail"]
    logged = [r for r in records if r.exc_info]
    assert logged, "the error is logged with its traceback"
    exc_info = logged[-1].exc_info
    assert exc_info and SECRET in str(exc_info[1])


def test_a_server_error_still_reaches_djangos_exception_signal(settings: Any) -> None:
    """Error reporting (and the test client, which re-raises) hear of it as before."""
    settings.ROOT_URLCONF = "tests.retrieval.failing_urls"

    with pytest.raises(RuntimeError, match=SECRET):
        Client().get("/api/v1/_fail/drf")


def test_errors_outside_the_api_keep_djangos_pages(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.retrieval.failing_urls"
    client = Client(raise_request_exception=False)

    failed = client.get("/elsewhere/_fail")
    missing = client.get("/nothing-here")

    assert failed.status_code == 500 and failed.headers["Content-Type"].startswith("text/html")
    assert missing.status_code == 404 and missing.headers["Content-Type"].startswith("text/html")


@DEBUG_MODES
@pytest.mark.usefixtures("steady_rate_window")
def test_authentication_and_throttling_errors_are_json(
    kb: KnowledgeBase, settings: Any, debug: bool
) -> None:
    settings.DEBUG = debug
    settings.CANON_API_RATE = "1/min"
    _, plaintext = api_key_create(tenant=kb.tenant, name="busy")
    busy = Client(headers={"Authorization": f"Bearer {plaintext}"})

    anonymous = Client().get("/api/v1/kbs/")
    assert busy.get("/api/v1/kbs/").status_code == 200
    throttled = busy.get("/api/v1/kbs/")

    assert_json_error(anonymous, 401, "not_authenticated")
    assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
    assert_json_error(throttled, 429, "throttled")
    assert int(throttled.headers["Retry-After"]) >= 1


# --- a real server process ------------------------------------------------------------------

SERVER = """
from wsgiref.simple_server import WSGIRequestHandler, make_server

class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass

from config.wsgi import application

server = make_server("127.0.0.1", 0, application, handler_class=Quiet)
print(server.server_port, flush=True)
server.serve_forever()
"""


def _serve(debug: bool) -> Iterator[str]:
    env = {
        **os.environ,
        "DEBUG": "1" if debug else "0",
        "SECRET_KEY": uuid.uuid4().hex * 2,
        "SECURE_SSL_REDIRECT": "0",
        "DATABASE_URL": database_url(),
        "CANON_CACHE_KEY_PREFIX": f"canon-test-{uuid.uuid4().hex}",
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    env.pop("CANON_PRELOAD_EMBEDDING_MODELS", None)
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        assert port.isdigit(), process.stderr.read() if process.stderr else port
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(params=[False, True], ids=["DEBUG=0", "DEBUG=1"])
def server(request: pytest.FixtureRequest, transactional_db: None) -> Iterator[str]:
    yield from _serve(bool(request.param))


def fetch(url: str, *, method: str = "GET", body: bytes | None = None, key: str = "") -> Any:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, data=body, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (http only)
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def test_a_real_server_answers_json_errors_in_both_modes(server: str, kb: KnowledgeBase) -> None:
    _, key = api_key_create(tenant=kb.tenant, name="real")
    deep = b'{"kb": "handbook", "query": "x", "metadata": ' + b'{"a":' * 5000 + b"1" + b"}" * 5001
    surrogate = b'{"kb": "handbook", "query": "x", "metadata": {"\\ud800": 1}}'

    answers = {
        "unknown path": (fetch(f"{server}/api/v1/nothing"), 404),
        "unknown api": (fetch(f"{server}/api/nothing", method="POST", body=b"{}"), 404),
        "no key": (fetch(f"{server}/api/v1/kbs/"), 401),
        "wrong method": (fetch(f"{server}/api/v1/search", key=key), 405),
        "deep json": (fetch(f"{server}/api/v1/search", method="POST", body=deep, key=key), 400),
        "surrogate": (
            fetch(f"{server}/api/v1/search", method="POST", body=surrogate, key=key),
            400,
        ),
        "NUL in path": (fetch(f"{server}/api/v1/kbs/%00/documents/", key=key), 400),
    }

    for name, ((status, content_type, body), expected) in answers.items():
        assert (status, content_type) == (expected, "application/json"), (name, body[:300])
        assert set(json.loads(body)) == {"error", "detail"}, name
