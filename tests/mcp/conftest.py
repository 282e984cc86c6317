"""The MCP server as a real process (`manage.py canon_mcp`, as the Procfile starts it) against
the test database and Redis, and what the tests search: two tenants, knowledge bases, keys with
and without an access group, documents published through the real pipeline. The world is built
once for the module and committed (tests/conftest.py: shared_data), so the server's own
connections see it; the tests only read it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import httpx2
import pytest
from django.conf import settings
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from kb.models import KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import api_key_create
from tests.conftest import database_url, shared_data
from tests.production_support import free_port
from tests.retrieval.factories import publish

ROOT = Path(__file__).resolve().parent.parent.parent
T = TypeVar("T")


def server_env(**values: str) -> dict[str, str]:
    """The environment of a server process: this test run's database, Redis and stored files,
    rate-limit counters of its own."""
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url(),
        REDIS_URL=settings.CELERY_BROKER_URL,
        CANON_STORAGE_ROOT=str(settings.STORAGE_ROOT),
        CANON_CACHE_KEY_PREFIX=f"canon-mcp-test-{uuid.uuid4().hex}",
        PYTHONUNBUFFERED="1",
    )
    env.update(values)
    return env


class McpServer:
    """`manage.py canon_mcp` serving streamable HTTP on a free port."""

    def __init__(self, log_path: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log_path = log_path
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "canon_mcp", "--port", str(self.port), "--threads", "4"],
            cwd=ROOT,
            env=server_env(**env),
            stdout=log_path.open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the MCP server did not start:\n{self.log()}")
            time.sleep(0.1)

    def _answers(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture(scope="module")
def mcp_server(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[McpServer]:
    """One server for the module's tests."""
    server = McpServer(tmp_path_factory.mktemp("mcp") / "server.log")
    yield server
    server.stop()


def session_call(url: str, key: str | None, work: Callable[[ClientSession], Awaitable[T]]) -> T:
    """Connect the official MCP client to `url` with `key` as its Bearer key, initialise, and
    run `work` with the session."""

    async def main() -> T:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await work(session)

    return anyio.run(main)


def call_tool(url: str, key: str, name: str, arguments: dict[str, Any] | None = None) -> Any:
    """One tool call through the official client; its CallToolResult."""

    async def work(session: ClientSession) -> Any:
        return await session.call_tool(name, arguments or {})

    return session_call(url, key, work)


@dataclass
class World:
    tenant: Tenant
    handbook: KnowledgeBase
    archive: KnowledgeBase
    foreign: KnowledgeBase
    key: str  # acme, every knowledge base, no access group
    secret_key: str  # acme, group "secret"
    handbook_key: str  # acme, the handbook only
    foreign_key: str  # another tenant
    public_chunk: int
    secret_chunk: int
    secret_document: int
    public_document: int
    multilingual: KnowledgeBase  # embeds with the packaged `use` model; no documents


@pytest.fixture(scope="module")
def world(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    with shared_data(django_db_blocker, tmp_path_factory, _world) as world:
        yield world


def _world() -> World:
    tenant = Tenant.objects.create(name="Acme", slug="acme")
    handbook = knowledge_base_create(tenant=tenant, name="Handbook", slug="handbook")
    archive = knowledge_base_create(tenant=tenant, name="Archive", slug="archive")
    other = Tenant.objects.create(name="Other", slug="other")
    foreign = knowledge_base_create(tenant=other, name="Foreign", slug="foreign")
    public = publish(
        handbook,
        "vacation",
        "# Leave\n\nVacation policy: every employee has thirty days of paid vacation per year.",
    )
    secret = publish(
        handbook,
        "merger",
        "# Plans\n\nThe secret vacation merger plan is confidential.",
        groups=("secret",),
    )
    publish(archive, "old-vacation", "The old vacation policy gave twenty days.")
    multilingual = knowledge_base_create(
        tenant=tenant,
        name="Multilingual",
        slug="multilingual",
        provider="use",
        model="use-multilingual-v3",
        dimensions=512,
    )
    publish(foreign, "foreign-vacation", "Foreign vacation rules of another tenant.")
    _, key = api_key_create(tenant=tenant, name="all")
    _, secret_key = api_key_create(tenant=tenant, name="secret", access_groups=["secret"])
    _, handbook_key = api_key_create(tenant=tenant, name="hb", knowledge_bases=[handbook])
    _, foreign_key = api_key_create(tenant=other, name="other")
    return World(
        tenant=tenant,
        handbook=handbook,
        archive=archive,
        foreign=foreign,
        key=key,
        secret_key=secret_key,
        handbook_key=handbook_key,
        foreign_key=foreign_key,
        public_chunk=public.chunks.get(ordinal=0).pk,
        secret_chunk=secret.chunks.get(ordinal=0).pk,
        secret_document=secret.document_id,
        public_document=public.document_id,
        multilingual=multilingual,
    )
