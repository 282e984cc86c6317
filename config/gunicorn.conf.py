"""Gunicorn's settings for Canon's web process: `gunicorn --config config/gunicorn.conf.py
config.wsgi` (the Procfile's `web`, `make run`, deploy/systemd/canon-web.service).

Each value below can be set from the environment (CANON_WEB_*); anything else, or any of these,
from the command line or GUNICORN_CMD_ARGS, which win over this file. docs/PRODUCTION.md says how
to size them.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def _cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


bind = [os.environ.get("CANON_WEB_BIND", "127.0.0.1:8000")]

# One process per core, a few threads each. Not gunicorn's usual 2 x cores + 1: every worker
# loads the local embedding model for query embedding (CANON_PRELOAD_EMBEDDING_MODELS, ~110 MB
# each; a worker is ~235 MB RSS with `use`), and search is CPU work in PostgreSQL and numpy, so
# more processes than cores add memory, not throughput. Threads overlap the waits (database,
# Redis, uploads streaming in) and share their process's model.
workers = _env_int("CANON_WEB_WORKERS", min(max(_cores(), 2), 8))
threads = _env_int("CANON_WEB_THREADS", 4)


class JsonErrorsWorker(ThreadWorker):
    """gunicorn's gthread worker, whose own refusals (a request it cannot parse: a control
    character in a header, a bad request line, headers too large; or its 500 when the answer
    itself cannot be written) are JSON under /api/, as every other error there is
    (retrieval.api.errors): `{"error", "detail"}`, or the Dify or OpenAI shape under their
    prefixes (`retrieval.compat.middleware.error_body`). gunicorn often refuses before it has
    read the path; then the answer is JSON too, in Canon's shape. Where the path is known to be
    outside /api/, gunicorn's own page stays.

    gunicorn writes the status and its page, and logs, as it always does; its page is kept
    aside (`_Page`) and replaced. Defined here, not in a module of Canon's, so the arbiter
    imports nothing of Canon's and HUP reloads it with this file."""

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        path = getattr(req or getattr(exc, "req", None), "path", None)
        if isinstance(path, str) and not _under_api(path):
            super().handle_error(req, client, addr, exc)
            return
        page = _Page()
        super().handle_error(req, page, addr, exc)
        status, reason = page.status()
        # Django and Canon's code are loaded: a worker handles requests only once its app is.
        from retrieval.api.errors import CODES, SERVER_ERROR
        from retrieval.compat.middleware import error_body

        code = CODES.get(status, "server_error" if status >= 500 else "bad_request")
        detail = SERVER_ERROR if status >= 500 else _refusal(exc)
        body = json.dumps(error_body(path, status, code, detail)).encode()
        head = (
            f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        try:
            util.write_nonblock(client, head.encode("latin-1") + body)
        except Exception:
            self.log.debug("Failed to send error message.")


def _under_api(path: str) -> bool:
    return path == "/api" or path.startswith("/api/")


# What each of gunicorn's refusals means, in words. The request's own text is not repeated: a
# malformed header line may be a credential (`Authorization Bearer ...` without its colon).
_REFUSALS = {
    "InvalidHeader": "a header is not valid HTTP (a control character in its value, or a "
    "malformed line)",
    "InvalidHeaderName": "a header's name is not valid HTTP",
    "ObsoleteFolding": "a header is folded over several lines, which HTTP no longer allows",
    "InvalidRequestLine": "the request line is not valid HTTP",
    "InvalidRequestMethod": "the method is not valid HTTP",
    "InvalidHTTPVersion": "the HTTP version is not one this server speaks",
    "LimitRequestLine": "the request line is longer than this server reads",
    "LimitRequestHeaders": "the headers are more, or longer, than this server reads",
    "UnsupportedTransferCoding": "the transfer coding is not one this server supports",
}
_HEADER_NAME = re.compile(r"[A-Z0-9!#$%&'*+.^_`|~-]{1,64}")


def _refusal(exc: BaseException) -> str:
    """gunicorn's refusal in words, naming the header when gunicorn names it by its name (upper
    case): with the request (`exc.req`) for a value it cannot read (Content-Length,
    Transfer-Encoding), without it for a control character."""
    kind = type(exc).__name__
    words = _REFUSALS.get(kind, "it is not valid HTTP")
    name = getattr(exc, "hdr", None)
    if kind == "InvalidHeader" and isinstance(name, str) and _HEADER_NAME.fullmatch(name):
        if getattr(exc, "req", None) is not None:
            words = f"the header {name} holds a value this server cannot read"
        else:
            words = f"the header {name} holds a control character"
    return f"The request could not be read: {words}."


class _Page:
    """Stands for the client's socket while gunicorn writes its error page, keeping it."""

    def __init__(self) -> None:
        self.data = b""

    def gettimeout(self) -> float:
        return 0.0

    def sendall(self, data: bytes) -> None:
        self.data += data

    def status(self) -> tuple[int, str]:
        """The status gunicorn gave: its page's status line ("HTTP/1.1 400 Bad Request")."""
        line = self.data.split(b"\r\n", 1)[0].decode("latin-1")
        _, code, reason = [*line.split(" ", 2), "", ""][:3]
        return (int(code), reason) if code.isdigit() else (500, "Internal Server Error")


worker_class = JsonErrorsWorker


def post_fork(server: Any, worker: Any) -> None:
    """In each new worker, before it imports the app: its Django settings give it a database
    pool (config/dbpool.py) sized by default to the threads it really runs (the command line
    and GUNICORN_CMD_ARGS win over this file), one connection per thread."""
    os.environ.setdefault("CANON_DB_POOL", "1")
    os.environ["CANON_WEB_THREADS"] = str(worker.cfg.threads)


# The app is imported by each worker, not by the arbiter before forking (preload_app off):
# config.wsgi loads the embedding model, whose encoder is per process (embeddings.use
# keys it by pid), so a forked copy would load its own on its first query anyway; nothing opens a
# database or Redis connection before a fork that a child could inherit; and HUP then reloads
# the code, not only the configuration.
preload_app = False

# The arbiter restarts a worker whose main loop has not reported for this long. It also covers a
# worker's start, which includes loading the model (1-2 s, longer when several load at once). A
# slow request does not trip it with gthread (another thread reports); uploads stream to disk.
timeout = _env_int("CANON_WEB_TIMEOUT", 60)
# On SIGTERM (stop) or SIGHUP (reload), requests in flight get this long to finish.
graceful_timeout = _env_int("CANON_WEB_GRACEFUL_TIMEOUT", 30)
# Idle keep-alive connections; behind a load balancer, set it above the balancer's idle timeout.
keepalive = _env_int("CANON_WEB_KEEPALIVE", 5)
# Each worker is replaced after about this many requests (jittered so they do not all restart at
# once): a bound on whatever a long-lived process accumulates. 0 turns it off.
max_requests = _env_int("CANON_WEB_MAX_REQUESTS", 5000)
max_requests_jitter = _env_int("CANON_WEB_MAX_REQUESTS_JITTER", 500)

# Request limits of the HTTP parser (gunicorn's defaults, stated): the request line (method, path
# and query) up to 4094 bytes, at most 100 header fields of up to 8190 bytes each; past them the
# answer is 400 (line: 414). Gunicorn has no body limit: Canon refuses a declared body over
# CANON_UPLOAD_MAX_BYTES x CANON_UPLOAD_MAX_FILES (+1 MB) before reading it, an API upload over
# CANON_UPLOAD_MAX_BYTES (+1 MB), and a file over CANON_UPLOAD_MAX_BYTES while it streams
# (kb/uploads.py, docs/PRODUCTION.md "Request limits").
limit_request_line = _env_int("CANON_WEB_LIMIT_REQUEST_LINE", 4094)
limit_request_fields = _env_int("CANON_WEB_LIMIT_REQUEST_FIELDS", 100)
limit_request_field_size = _env_int("CANON_WEB_LIMIT_REQUEST_FIELD_SIZE", 8190)

# Workers' heartbeat files (mkstemp, private) on a RAM disk when there is one: a slow or full
# disk must not make the arbiter think a worker hung.
_SHM = "/dev/shm"  # noqa: S108
if Path(_SHM).is_dir():
    worker_tmp_dir = _SHM

# No control socket: signals (TERM stop, HUP reload, TTIN/TTOU more/fewer workers) are the
# interface, and its default path under $HOME would be shared by every gunicorn of that user.
control_socket_disable = True

proc_name = "canon-web"
accesslog = "-"
errorlog = "-"
loglevel = os.environ.get("LOG_LEVEL", "info").lower()
# Client, request line, status, bytes sent, milliseconds, user agent.
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms "%(a)s"'


class AccessFields(logging.Filter):
    """With LOG_FORMAT=json, an access line also carries its parts as fields."""

    def filter(self, record: logging.LogRecord) -> bool:
        atoms = record.args if isinstance(record.args, dict) else None
        if atoms is not None and record.name == "gunicorn.access":
            record.method = atoms.get("m")
            record.path = atoms.get("U")
            status = str(atoms.get("s"))
            record.status = int(status) if status.isdigit() else status
            record.bytes = atoms.get("B")
            record.duration_ms = atoms.get("M")
            record.remote_addr = atoms.get("h")
        return True


# LOG_FORMAT=json: gunicorn's own lines (arbiter, workers, access) as one JSON object per line,
# with the same fields as Django's (config/settings.py LOGGING).
if os.environ.get("LOG_FORMAT") == "json":
    _handler: dict[str, Any] = {
        "class": "logging.StreamHandler",
        "formatter": "json",
        "filters": ["access_fields"],
        "stream": "ext://sys.stdout",
    }
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"access_fields": {"()": AccessFields}},
        "formatters": {
            "json": {
                "()": "pythonjsonlogger.json.JsonFormatter",
                "fmt": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s",
                "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
            }
        },
        "handlers": {"json": _handler},
        "root": {"handlers": ["json"], "level": "INFO"},
        "loggers": {
            "gunicorn.error": {"handlers": ["json"], "level": loglevel.upper(), "propagate": False},
            "gunicorn.access": {"handlers": ["json"], "level": "INFO", "propagate": False},
        },
    }
