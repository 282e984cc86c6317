"""The production server as `make run` and the Procfile start it (gunicorn, DEBUG off, local
HTTP), against the test database: what it shows, what it serves, and how it refuses an upload
that is too large — before the upload has been sent, not after reading it whole."""

from __future__ import annotations

import http.client
import re
import select
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.models import User

from kb.models import Document, KnowledgeBase, Revision, TenantMembership
from tests.production_support import Service, procfile_web

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LIMIT = 1024 * 1024  # CANON_UPLOAD_MAX_BYTES of the server under test
PASSWORD = "a-long-test-password"


class Web:
    def __init__(self, service: Service, port: int) -> None:
        self.service = service
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def worker_pids(self) -> list[int]:
        import psutil

        return [child.pid for child in psutil.Process(self.service.proc.pid).children()]


@pytest.fixture(scope="module")
def web(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    """The Procfile's web process in make run's environment, one worker of two threads."""
    with procfile_web(
        tmp_path_factory.mktemp("web"),
        CANON_WEB_WORKERS="1",
        CANON_WEB_THREADS="2",
        CANON_STORAGE_ROOT=str(tmp_path_factory.getbasetemp() / "storage"),
        CANON_UPLOAD_MAX_BYTES=str(LIMIT),
    ) as (service, port):
        yield Web(service, port)


@pytest.fixture
def api_key(kb: KnowledgeBase, api_key: str) -> str:
    return api_key


# --- what it shows with DEBUG off --------------------------------------------------------------


def test_it_is_gunicorn_with_debug_off_and_no_pattern_list(web: Web) -> None:
    page = httpx.get(f"{web.url}/no-such-page")
    api = httpx.get(f"{web.url}/api/no-such-endpoint")

    assert httpx.get(f"{web.url}/healthz").headers["server"].startswith("gunicorn")
    assert page.status_code == 404
    assert "URLconf" not in page.text and "admin/" not in page.text
    assert api.status_code == 404
    assert api.headers["content-type"] == "application/json"
    assert api.json()["error"] == "not_found"


def test_readyz_sees_the_database_and_redis(web: Web) -> None:
    ready = httpx.get(f"{web.url}/readyz")

    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"] == {"database": "ok", "redis": "ok"}


def test_admin_and_api_docs_assets_are_served_hashed_compressed_and_cached(web: Web) -> None:
    login = httpx.get(f"{web.url}/admin/login/")
    docs = httpx.get(f"{web.url}/api/docs/")
    css = re.findall(r'href="(/static/admin/css/base\.[0-9a-f]{12}\.css)"', login.text)
    js = re.findall(r'src="(/static/drf_spectacular_sidecar/[^"]+\.[0-9a-f]{12}\.js)"', docs.text)

    assert login.status_code == 200 and docs.status_code == 200
    assert css and js, "the pages name hashed static files"
    for path in (css[0], js[0]):
        asset = httpx.get(f"{web.url}{path}", headers={"Accept-Encoding": "gzip"})
        assert asset.status_code == 200, path
        assert asset.headers["content-encoding"] == "gzip"
        assert "immutable" in asset.headers["cache-control"]


# --- uploads too large -------------------------------------------------------------------------


def multipart(boundary: str, fields: dict[str, str], files: list[tuple[str, str, bytes]]) -> bytes:
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    for field, filename, content in files:
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; '
            f'filename="{filename}"\r\nContent-Type: text/plain\r\n\r\n'.encode()
            + content
            + b"\r\n"
        )
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


def send_withholding(
    web: Web, head: str, body: bytes, *, withhold: int
) -> tuple[http.client.HTTPResponse, bytes, int]:
    """Send a request's head and its body in 64 KiB pieces, keeping the last `withhold` bytes
    back, and stop as soon as the server answers. A server that read the whole body before
    answering would wait for those bytes forever (the socket timeout fails the test); one that
    refused early has answered. Returns the answer, its body and the body bytes sent."""
    sock = socket.create_connection(("127.0.0.1", web.port), timeout=30)
    sent = 0
    with sock:
        sock.sendall(head.encode())
        while sent < len(body) - withhold:
            if select.select([sock], [], [], 0)[0]:
                break  # answered already
            piece = body[sent : min(sent + 65536, len(body) - withhold)]
            try:
                sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(piece)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response, response.read(), sent


def api_upload_head(api_key: str, boundary: str, length: int, *, chunked: bool = False) -> str:
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}"
    return (
        "POST /api/v1/kbs/handbook/documents/ HTTP/1.1\r\n"
        f"Host: 127.0.0.1\r\nAuthorization: Bearer {api_key}\r\n"
        f"Idempotency-Key: {uuid.uuid4()}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n{framing}\r\n\r\n"
    )


def test_an_api_upload_declaring_more_than_the_limit_is_refused_before_its_body_is_sent(
    web: Web, api_key: str
) -> None:
    boundary = uuid.uuid4().hex
    body = multipart(boundary, {"key": "big"}, [("file", "big.txt", b"x" * (3 * LIMIT))])

    response, answer, sent = send_withholding(
        web, api_upload_head(api_key, boundary, len(body)), body, withhold=len(body)
    )

    assert sent == 0
    assert response.status == 413
    assert response.getheader("Content-Type") == "application/json"
    assert b'"file_too_large"' in answer
    assert not Revision.objects.exists()


def test_an_api_file_passing_the_limit_while_it_streams_is_refused_there(
    web: Web, api_key: str
) -> None:
    # Declared within what the view accepts up front (limit + 1 MB), so only streaming stops it.
    boundary = uuid.uuid4().hex
    body = multipart(boundary, {"key": "big"}, [("file", "big.txt", b"x" * (LIMIT * 7 // 4))])
    head = api_upload_head(api_key, boundary, len(body))

    response, answer, sent = send_withholding(web, head, body, withhold=LIMIT // 2)

    assert LIMIT < sent < len(body)
    assert response.status == 413
    assert b'"file_too_large"' in answer
    assert not Revision.objects.exists()


def test_a_chunked_upload_is_asked_for_a_length_before_its_body_is_read(
    web: Web, api_key: str
) -> None:
    boundary = uuid.uuid4().hex
    first = multipart(boundary, {"key": "doc"}, [("file", "doc.txt", b"y" * 65536)])
    chunk = f"{len(first):x}\r\n".encode() + first + b"\r\n"
    head = api_upload_head(api_key, boundary, 0, chunked=True)

    response, answer, _ = send_withholding(web, head, chunk + b"0\r\n\r\n", withhold=5)

    assert response.status == 411
    assert b'"length_required"' in answer
    assert not Revision.objects.exists()


def _peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_an_admin_upload_over_the_limit_is_a_message_and_never_held_in_memory(
    web: Web, kb: KnowledgeBase
) -> None:
    user = User.objects.create_superuser("uploader", "", PASSWORD)
    TenantMembership.objects.create(user=user, tenant=kb.tenant)
    big = b"z" * (16 * LIMIT)  # within the request ceiling (20 files x LIMIT), 16 x the limit
    with httpx.Client(base_url=web.url, follow_redirects=True) as browser:
        login = browser.get("/admin/login/")
        browser.post(
            "/admin/login/",
            data={
                "username": "uploader",
                "password": PASSWORD,
                "csrfmiddlewaretoken": _csrf(login),
            },
        )
        form = browser.get("/admin/kb/document/upload/")
        assert form.status_code == 200, form.text
        (worker,) = web.worker_pids()
        peak_before = _peak_rss(worker)

        page = browser.post(
            "/admin/kb/document/upload/",
            data={"csrfmiddlewaretoken": _csrf(form), "kb": str(kb.pk), "access_groups": ""},
            files=[("files", ("big.txt", big, "text/plain")), ("files", ("small.txt", b"Hi."))],
        )

        peak_after = _peak_rss(worker)
    assert page.status_code == 200
    shown = page.text.lower()  # the admin capitalises its messages
    assert "big.txt is larger than the limit of 1 mb and was not stored." in shown
    assert "new document small from small.txt" in shown
    assert list(Document.objects.values_list("key", flat=True)) == ["small"]
    assert peak_after - peak_before < len(big) // 2, (peak_before, peak_after)


def _csrf(page: httpx.Response) -> str:
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert match, page.text
    return match.group(1)
