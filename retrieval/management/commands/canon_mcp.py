"""Serve Canon's MCP server (retrieval/mcp): streamable HTTP at /mcp behind the API keys (the
Procfile's `mcp` process), or stdio for a local agent with one key. Like the web process, it
loads CANON_PRELOAD_EMBEDDING_MODELS before it serves, so the first search does not wait for
the model (a few seconds)."""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

import anyio
import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

import embeddings
from retrieval.mcp.server import MCP_PATH, CanonMCP
from retrieval.principals import InvalidKey, principal_from_key
from textkit import analysis

logger = logging.getLogger("canon.mcp")

DEFAULT_BIND = "127.0.0.1:8001"


def _bind() -> tuple[str, int]:
    host, _, port = os.environ.get("CANON_MCP_BIND", DEFAULT_BIND).rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


class Command(BaseCommand):
    help = (
        "Serve the MCP server: streamable HTTP on CANON_MCP_BIND (default 127.0.0.1:8001) at "
        "/mcp, each request authenticated by its Bearer API key; or --stdio with --key (or "
        "CANON_MCP_KEY) for a local agent."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        host, port = _bind()
        parser.add_argument("--stdio", action="store_true", help="serve on stdin and stdout")
        parser.add_argument(
            "--key", default=None, help="stdio: the API key (default: $CANON_MCP_KEY)"
        )
        parser.add_argument("--host", default=host, help=f"HTTP: address (default {host})")
        parser.add_argument("--port", type=int, default=port, help=f"HTTP: port (default {port})")
        parser.add_argument(
            "--threads",
            type=int,
            default=int(os.environ.get("CANON_MCP_THREADS", "8")),
            help="tool calls run at once, each on its own database connection "
            "(default $CANON_MCP_THREADS or 8)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # A refused call is logged once, by canon.mcp; the SDK's own line would repeat it (its
        # warnings and crashes are kept).
        logging.getLogger("mcp.server.mcpserver.server").setLevel(logging.WARNING)
        threads = max(1, int(options["threads"]))
        if options["stdio"]:
            key = options["key"] or os.environ.get("CANON_MCP_KEY", "")
            if not key:
                raise CommandError("--stdio needs an API key: --key or CANON_MCP_KEY.")
            try:
                principal_from_key(key)  # refuse a bad key at once; calls resolve it again
            except InvalidKey as exc:
                raise CommandError(f"Invalid API key: {exc}.") from exc
            finally:
                connections.close_all()
            _preload_models()
            anyio.run(CanonMCP(threads=threads, stdio_key=key).run_stdio)
            return
        if options["key"]:
            raise CommandError("--key is for --stdio; over HTTP each request brings its own.")
        _preload_models()
        app = CanonMCP(threads=threads).http_app()
        host, port = options["host"], options["port"]
        logger.info("serving MCP on http://%s:%s%s", host, port, MCP_PATH)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,  # Django's LOGGING: the same format and handlers as every process
            proxy_headers=True,
            forwarded_allow_ips=os.environ.get("CANON_MCP_FORWARDED_ALLOW_IPS", "127.0.0.1"),
            timeout_graceful_shutdown=30,
        )
        # uvicorn shuts down gracefully on SIGTERM or SIGINT, then raises the signal again with
        # the handler it found: this one, so the process exits 0 like Canon's other processes
        # (systemd and `make run` stop them so) instead of dying of the signal.
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, _exit_cleanly)
        uvicorn.Server(config).run()


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _preload_models() -> None:
    """The models search needs, loaded before the server answers (as config/wsgi.py does for
    the web process): CANON_PRELOAD_EMBEDDING_MODELS, and the Chinese dictionary with them."""
    if settings.PRELOAD_EMBEDDING_MODELS:
        embeddings.preload(settings.PRELOAD_EMBEDDING_MODELS)
        analysis.preload()
