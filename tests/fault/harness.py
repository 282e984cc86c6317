"""Tools for crash tests: a concurrent searcher that checks every result set against the
visibility rule, uploads, subprocess helpers, convergence and the final kb_verify."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from ingestion.relay import outbox_relay_batch
from ingestion.sweeper import lease_sweep
from kb import storage
from kb.models import Build, Document, KnowledgeBase, Publication
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.conftest import ROOT, database_url
from tests.helpers import upload_text
from work.models import IngestionTask

# Crash tests run workers with short leases so that expiry and requeue happen within seconds.
FAULT_LEASE_TTL = "2"


def paragraphs(tag: str, n: int = 12, words: int = 60) -> str:
    """A document of `n` distinct paragraphs; `tag` marks the revision in every chunk."""
    return "\n\n".join(
        f"{tag} paragraph {i}. " + " ".join(f"{tag}word{i}x{j}" for j in range(words)) + "."
        for i in range(n)
    )


def upload(kb: KnowledgeBase, key: str, text: str) -> Document:
    """Upload a new document or a new revision of `key` through the services."""
    return upload_text(kb, key, text).document


def live_revision(document: Document) -> int | None:
    kb = KnowledgeBase.objects.get(pk=document.kb_id)
    publication = (
        Publication.objects.filter(
            document_id=document.pk, index_version_id=kb.active_index_version_id
        )
        .select_related("build__revision")
        .first()
    )
    return publication.build.revision.number if publication else None


def pending_tasks() -> int:
    return IngestionTask.objects.filter(
        status__in=[
            IngestionTask.Status.QUEUED,
            IngestionTask.Status.RUNNING,
            IngestionTask.Status.RETRY_WAIT,
        ]
    ).count()


def beat_once() -> None:
    """What beat does in production: relay the outbox, sweep expired leases."""
    outbox_relay_batch()
    lease_sweep()


def converge(
    condition: Callable[[], Any], *, timeout: float = 90.0, what: str = "convergence"
) -> Any:
    """Run the beat's jobs until `condition()` holds and no task is pending."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value and pending_tasks() == 0:
            return value
        if time.monotonic() > deadline:
            tasks = list(IngestionTask.objects.values_list("id", "status", "attempt", "last_error"))
            pytest.fail(f"no {what} after {timeout}s; tasks: {tasks}")
        beat_once()
        time.sleep(0.2)


def assert_verified() -> None:
    """`manage.py kb_verify` must report no violation."""
    call_command("kb_verify")


def wait_for_marker(marker_dir: Path, point: str, timeout: float = 60.0) -> Path:
    deadline = time.monotonic() + timeout
    while True:
        found = sorted(marker_dir.glob(f"{point}.*")) if marker_dir.exists() else []
        if found:
            return found[0]
        if time.monotonic() > deadline:
            pytest.fail(f"the process never reached fault point {point}")
        beat_once()
        time.sleep(0.1)


def manage_subprocess(
    *args: str, env: dict[str, str] | None = None, code: str | None = None
) -> subprocess.Popen[bytes]:
    """A `manage.py` command (or `manage.py shell -c CODE`) in its own process, against the test
    database."""
    full_env = dict(os.environ)
    full_env.update(
        DATABASE_URL=database_url(),
        CANON_STORAGE_ROOT=str(storage.storage_root()),
    )
    full_env.update(env or {})
    argv = [sys.executable, str(ROOT / "manage.py"), *args]
    if code is not None:
        argv += ["shell", "-c", code]
    return subprocess.Popen(
        argv, cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def terminate_backends(application_name: str) -> int:
    """pg_terminate_backend every connection of one process (found by application_name)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            [application_name],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def resume(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


@dataclass(eq=False)
class Searcher(threading.Thread):
    """Searches continuously on its own connection. Each result set is checked in the same
    repeatable-read snapshot it was read in: every document's hits come from one build, and that
    build is the live, complete build of a non-deleted document in the active index version."""

    kb: KnowledgeBase
    queries: list[str]
    searches: int = 0
    violations: list[str] = field(default_factory=list)
    seen: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True, name="searcher")
        self._stop_event = threading.Event()
        self.principal = Principal(
            tenant_id=self.kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
        )

    def run(self) -> None:
        modes = ["vector", "keyword", "hybrid"]
        try:
            while not self._stop_event.is_set():
                query = self.queries[self.searches % len(self.queries)]
                try:
                    self._search_once(query, modes[self.searches % len(modes)])
                except Exception as exc:  # a searcher error is a finding, not a crash
                    self.violations.append(f"search raised {type(exc).__name__}: {exc}")
                self.searches += 1
                time.sleep(0.02)
        finally:
            connection.close()

    def _search_once(self, query: str, mode: str) -> None:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            result = search(principal=self.principal, kb=self.kb, query=query, top_k=50, mode=mode)
            builds_by_document: dict[str, set[int]] = defaultdict(set)
            for hit in result.hits:
                builds_by_document[hit.document_key].add(hit.build_id)
            for key, build_ids in builds_by_document.items():
                if len(build_ids) > 1:
                    self.violations.append(f"{key}: one result set mixes builds {build_ids}")
                for build_id in build_ids:
                    self._check_build(key, build_id)

    def _check_build(self, key: str, build_id: int) -> None:
        build = Build.objects.select_related("document", "revision", "kb").get(pk=build_id)
        live = Publication.objects.filter(
            document_id=build.document_id,
            index_version_id=build.kb.active_index_version_id,
            build_id=build_id,
        ).exists()
        complete = build.chunks.count() == build.expected_chunk_count
        if not live or build.state != Build.State.LIVE:
            self.violations.append(f"{key}: build {build_id} ({build.state}) is not the live one")
        if not complete:
            self.violations.append(f"{key}: build {build_id} is incomplete")
        if build.document.deleted_at is not None:
            self.violations.append(f"{key}: document is deleted but was returned")
        self.seen[key].add(build.revision.number)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)

    def assert_clean(self, *, min_searches: int = 5) -> None:
        assert self.searches >= min_searches, f"the searcher ran only {self.searches} searches"
        assert self.violations == [], self.violations[:10]


RUNNING_SEARCHERS: list[Searcher] = []


def run_with_searcher(kb: KnowledgeBase, queries: list[str]) -> Searcher:
    """Start a searcher; tests/fault/conftest.py stops it even when the test fails (a searcher
    left running would block the test database's flush)."""
    searcher = Searcher(kb=kb, queries=queries)
    searcher.start()
    RUNNING_SEARCHERS.append(searcher)
    return searcher
