"""A real OpenAI-compatible embeddings server for tests: `POST /v1/embeddings` on 127.0.0.1 and a
free port, served from a thread of the test process, that can be told how to misbehave.

Vectors come from the hash provider, so what the server returns is deterministic and search over
it works. Modes (`server.mode` for every request, `server.fail_next(...)` for the next ones):

    ok            200 with one vector per input
    429           429 with `Retry-After: server.retry_after`
    502/503/504   that status
    500           an internal error (not retryable)
    401_echo      401 whose message quotes the Authorization header (as some gateways do)
    503_echo      503 whose body quotes the Authorization header
    hang          hold the request until `server.hang_seconds` pass or the server stops
    malformed     200 with a body that is not JSON
    wrong_dims    200 with vectors one dimension short
    wrong_count   200 with one vector fewer than inputs
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from embeddings import HashEmbeddingProvider


@dataclass(frozen=True)
class Seen:
    """One request as the server saw it."""

    mode: str
    inputs: list[str]
    model: str
    authorization: str


class EmbeddingServer:
    def __init__(self, *, dimensions: int, model: str = "test-embedding") -> None:
        self.dimensions = dimensions
        self.model = model
        self.mode = "ok"
        self.retry_after = "1"
        self.hang_seconds = 20.0
        self.seen: list[Seen] = []
        self._next: deque[str] = deque()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._vectors = HashEmbeddingProvider(model=model, dimensions=dimensions)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.seen)

    def fail_next(self, *modes: str) -> None:
        with self._lock:
            self._next.extend(modes)

    def expected(self, texts: list[str]) -> list[list[float]]:
        return self._vectors.embed(texts)

    def start(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _answer(
        self, body: dict[str, Any], authorization: str
    ) -> tuple[int, dict[str, str], bytes]:
        inputs = body.get("input") or []
        inputs = [inputs] if isinstance(inputs, str) else list(inputs)
        with self._lock:
            mode = self._next.popleft() if self._next else self.mode
            self.seen.append(Seen(mode, inputs, str(body.get("model")), authorization))
        if mode == "hang":
            self._released.wait(self.hang_seconds)
            mode = "ok"
        if mode == "429":
            return 429, {"Retry-After": self.retry_after}, _error("Rate limit reached")
        if mode in ("500", "502", "503", "504"):
            return int(mode), {}, _error(f"upstream says {mode}")
        if mode == "401_echo":
            return 401, {}, _error(f"Incorrect API key provided: {authorization}")
        if mode == "503_echo":
            return 503, {}, _error(f"overloaded while serving {authorization}")
        if mode == "malformed":
            return 200, {}, b'{"object": "list", "data": [{"embedding": [0.1, '
        vectors = self._vectors.embed(inputs)
        if mode == "wrong_dims":
            vectors = [v[:-1] for v in vectors]
        elif mode == "wrong_count":
            vectors = vectors[:-1]
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        document: dict[str, Any] = {
            "object": "list",
            "data": data,
            "model": body.get("model"),
            "usage": {},
        }
        return 200, {}, json.dumps(document).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/embeddings":
                    self._send(404, {}, _error(f"no route {self.path}"))
                    return
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._send(400, {}, _error("the request is not JSON"))
                    return
                status, headers, payload = server._answer(
                    body, self.headers.get("Authorization", "")
                )
                self._send(status, headers, payload)

            def _send(self, status: int, headers: dict[str, str], payload: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout): nothing to answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def _error(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "test"}}).encode()


def clear_breakers(prefix: str) -> None:
    """Remove every Redis key of the breakers under `prefix` (test isolation)."""
    from embeddings.breaker import redis_client

    client = redis_client()
    keys = list(client.scan_iter(f"{prefix}:*"))
    if keys:
        client.delete(*keys)
