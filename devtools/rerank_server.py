"""A real reranking server for tests and bench/rerank_cost.py: both wire protocols Canon speaks,
on 127.0.0.1 and a free port, served from threads of the calling process, that can be told how
to misbehave.

    POST /rerank     (tei)    {"query", "texts", "truncate"} -> [{"index", "score"}, ...]
    POST /v1/rerank  (cohere) {"model", "query", "documents", "top_n"}
                              -> {"results": [{"index", "relevance_score"}, ...]}

Scores come from `overlap` (the share of the query's words found in the text) unless told
otherwise, and results go out best first, as real servers send them. Modes (`server.mode` for
every request, `server.fail_next(...)` for the next ones):

    ok            200, scored by the scorer
    reverse       200, the last text sent scores highest (any order it was sent in is reversed)
    capped        200, only the first half of the texts scored (a server capping its answer)
    429           429 with `Retry-After: server.retry_after`
    500/502/503   that status
    400           400 (a refusal)
    401_echo      401 whose message quotes the Authorization header (as some gateways do)
    503_echo      503 whose body quotes the Authorization header
    hang          answer only after `server.hang_seconds` (or when the server stops)
    malformed     200 with a body that is not JSON
    wrong_shape   200 with the other protocol's shape
    bad_index     200 naming an index past the texts
    duplicate     200 scoring text 0 twice
    nan           200 with a NaN score
    none          200 scoring nothing
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_WORDS = re.compile(r"\w+")


def overlap(query: str, text: str) -> float:
    """The share of the query's distinct words that occur in the text (case-folded)."""
    wanted = set(_WORDS.findall(query.casefold()))
    if not wanted:
        return 0.0
    return len(wanted & set(_WORDS.findall(text.casefold()))) / len(wanted)


@dataclass(frozen=True)
class Seen:
    """One request as the server saw it."""

    protocol: str
    mode: str
    query: str
    texts: list[str]
    body: dict[str, Any]
    authorization: str


class RerankServer:
    def __init__(self, *, scorer: Callable[[str, str], float] = overlap) -> None:
        self.scorer = scorer
        self.mode = "ok"
        self.retry_after = "1"
        self.hang_seconds = 20.0
        self.seen: list[Seen] = []
        # Seconds each answered request spent scoring (the bench reports them apart).
        self.scoring_seconds: list[float] = []
        self._next: deque[str] = deque()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.seen)

    def fail_next(self, *modes: str) -> None:
        with self._lock:
            self._next.extend(modes)

    def take_scoring_seconds(self) -> list[float]:
        """The scoring times recorded since the last call (the bench's per-search figures)."""
        with self._lock:
            taken, self.scoring_seconds = self.scoring_seconds, []
        return taken

    def expected(self, query: str, texts: list[str]) -> list[float]:
        """The scores mode `ok` gives, in the texts' order."""
        return [self.scorer(query, text) for text in texts]

    def start(self) -> RerankServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _answer(
        self, protocol: str, body: dict[str, Any], authorization: str
    ) -> tuple[int, dict[str, str], bytes]:
        texts = list(body.get("texts" if protocol == "tei" else "documents") or [])
        query = str(body.get("query", ""))
        with self._lock:
            mode = self._next.popleft() if self._next else self.mode
            self.seen.append(Seen(protocol, mode, query, texts, body, authorization))
        if mode == "hang":
            self._released.wait(self.hang_seconds)
            mode = "ok"
        if mode == "429":
            return 429, {"Retry-After": self.retry_after}, _error("Rate limit reached")
        if mode in ("400", "500", "502", "503"):
            return int(mode), {}, _error(f"upstream says {mode}")
        if mode == "401_echo":
            return 401, {}, _error(f"Incorrect API key provided: {authorization}")
        if mode == "503_echo":
            return 503, {}, _error(f"overloaded while serving {authorization}")
        if mode == "malformed":
            return 200, {}, b'[{"index": 0, "score": 0.'
        started = time.perf_counter()
        if mode == "reverse":
            scores = [float(i) for i in range(len(texts))]
        else:
            scores = self.expected(query, texts)
        with self._lock:
            self.scoring_seconds.append(time.perf_counter() - started)
        pairs = sorted(enumerate(scores), key=lambda pair: -pair[1])  # best first, like servers
        if mode == "capped":
            pairs = [(i, s) for i, s in pairs if i < max(1, len(texts) // 2)]
        elif mode == "bad_index":
            pairs = [*pairs, (len(texts), 1.0)]
        elif mode == "duplicate":
            pairs = [*pairs, (0, 0.5)]
        elif mode == "nan":
            pairs = [(i, float("nan") if i == 0 else s) for i, s in pairs]
        elif mode == "none":
            pairs = []
        return 200, {}, _encode(protocol, pairs, wrong_shape=mode == "wrong_shape")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                protocol = {"/rerank": "tei", "/v1/rerank": "cohere"}.get(self.path.rstrip("/"))
                if protocol is None:
                    self._send(404, {}, _error(f"no route {self.path}"))
                    return
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._send(400, {}, _error("the request is not JSON"))
                    return
                status, headers, payload = server._answer(
                    protocol, body, self.headers.get("Authorization", "")
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


def _encode(protocol: str, pairs: list[tuple[int, float]], *, wrong_shape: bool) -> bytes:
    tei = [{"index": i, "score": s} for i, s in pairs]
    cohere = {"results": [{"index": i, "relevance_score": s} for i, s in pairs], "meta": {}}
    if (protocol == "tei") != wrong_shape:
        return json.dumps(tei).encode()
    return json.dumps(cohere).encode()


def _error(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "test"}}).encode()
