"""The soak itself (docs/SOAK.md): a driver, a chaos monkey and three searchers against real
processes, then convergence, a report and kb_verify. Runs in a process whose environment
`tests.soak.__main__` prepared (the soak's database, Redis, queue, short leases) before Django
was set up."""

from __future__ import annotations

import contextlib
import io
import random
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import Count, F, Q
from django.test import Client
from django.utils import timezone

from ingestion.models import AuditEvent, IngestionTask, OutboxEvent
from kb import services
from kb.models import (
    Build,
    Document,
    IndexVersion,
    KnowledgeBase,
    Publication,
    PublicationEvent,
    Revision,
    Tenant,
    TenantMembership,
)
from kb.services import ActionRefused, IncompleteBuild
from retrieval.principals import Principal, api_key_create
from retrieval.selectors import search
from tests.soak.checker import Checker, Hit, Ledger, ResultSet
from tests.soak.processes import Service

WORDS = [
    "lease", "outbox", "relay", "sweeper", "beat", "worker", "chunk", "build", "revision",
    "publish", "pointer", "snapshot", "approval", "rollback", "index", "version", "vector",
    "keyword", "hybrid", "tenant", "group", "delete", "restore", "retention", "purge", "redis",
    "postgres", "heartbeat", "fence", "candidate", "switch", "manifest", "ordinal", "embedding",
    "provider", "breaker", "reconciler", "anomaly", "verify", "garbage", "harbour", "lantern",
    "meadow", "orchard", "quartz", "saddle", "timber", "velvet", "willow",
]  # fmt: skip
MODES = ("keyword", "vector", "hybrid")
PUBLISHING = [PublicationEvent.Action.PUBLISH, PublicationEvent.Action.APPROVE]
PUBLISHING.append(PublicationEvent.Action.ROLLBACK)
OPEN_TASK = [IngestionTask.Status.QUEUED, IngestionTask.Status.RUNNING]
OPEN_TASK.append(IngestionTask.Status.RETRY_WAIT)


@dataclass
class Settings:
    minutes: float
    seed: int
    lease_ttl: float
    sweep_interval: float
    converge_timeout: float
    logs: Path


@dataclass
class World:
    tenant: Tenant
    admin: User
    kbs: dict[str, KnowledgeBase]  # slug -> knowledge base ("open", and "gated" with approval)
    writer_key: str
    staff_key: str
    public_key: str


def world_create() -> World:
    tenant = Tenant.objects.create(name="Soak", slug="soak")
    admin = User.objects.create_superuser("soak", "", uuid.uuid4().hex)
    TenantMembership.objects.create(user=admin, tenant=tenant)
    kbs = {
        "open": services.knowledge_base_create(tenant=tenant, name="Open", slug="open"),
        "gated": services.knowledge_base_create(
            tenant=tenant, name="Gated", slug="gated", require_approval=True
        ),
    }
    _, writer = api_key_create(tenant=tenant, name="soak writer", access_groups=["staff"])
    _, staff = api_key_create(tenant=tenant, name="soak staff", access_groups=["staff"])
    _, public = api_key_create(tenant=tenant, name="soak public")
    return World(tenant, admin, kbs, writer, staff, public)


def api_client(key: str) -> Client:
    """The whole API stack in this process (middleware, DRF, throttling), over no network."""
    return Client(headers={"Authorization": f"Bearer {key}"}, SERVER_NAME="localhost")


def document_text(rng: random.Random, key: str, revision: int) -> tuple[str, bytes]:
    paragraphs = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(25, 70))).capitalize() + "."
        for _ in range(rng.randint(2, 5))
    ]
    if rng.random() < 0.5:
        body = f"# {key} revision {revision}\n\n" + "\n\n".join(paragraphs)
        return f"{key}.md", body.encode()
    return f"{key}.txt", (f"{key} revision {revision}\n\n" + "\n\n".join(paragraphs)).encode()


@dataclass
class Tally:
    """Counts by kind, shared between threads."""

    counts: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, note: str = "") -> None:
        with self._lock:
            self.counts[kind] += 1
            if note and len(self.notes) < 50:
                self.notes.append(f"{kind}: {note}")

    def total(self, prefix: str = "") -> int:
        with self._lock:
            return sum(n for k, n in self.counts.items() if k.startswith(prefix))


class Loop(threading.Thread):
    """A thread that repeats `step` until stopped, on its own database connection."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.halt = threading.Event()
        self.crashed: str | None = None

    def step(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                self.step()
        except Exception:
            self.crashed = traceback.format_exc()
        finally:
            connection.close()

    def stop(self) -> None:
        self.halt.set()
        self.join(120)


# --- the driver ------------------------------------------------------------------------------


class Driver(Loop):
    """Random operations through the API (uploads, revisions, deletes) and the services the
    admin's actions call (restores, approvals, rollbacks, new index versions, swaps, version
    rollbacks)."""

    WEIGHTS = {
        "upload": 18,
        "revision": 30,
        "delete": 8,
        "restore": 6,
        "approve": 14,
        "rollback": 7,
        "swap": 3,
        "version_rollback": 1,
    }
    WRITES = ("upload", "revision", "delete", "restore", "rollback")
    QUIET_SECONDS = 45.0

    def __init__(self, world: World, ledger: Ledger, rng: random.Random) -> None:
        super().__init__("driver")
        self.world = world
        self.ledger = ledger
        self.rng = rng
        self.ops = Tally()
        self.client = api_client(world.writer_key)
        self.keys: dict[str, list[str]] = {slug: [] for slug in world.kbs}
        self.uploads_ok: Counter[str] = Counter()  # key -> uploads answered 201
        self.version_created_at: dict[str, float] = {}
        # slug -> until when (monotonic) the driver leaves a knowledge base alone but for
        # approvals, so that an index version can catch up and cover it
        self.quiet: dict[str, float] = {}

    def step(self) -> None:
        for slug, until in list(self.quiet.items()):
            if until > time.monotonic():
                self._swap_when_covered(slug)
        kinds, weights = zip(*self.WEIGHTS.items(), strict=True)
        kind = self.rng.choices(kinds, weights)[0]
        slugs = list(self.world.kbs)
        if kind in self.WRITES:  # a knowledge base on its way to a swap takes no new work
            slugs = [s for s in slugs if self.quiet.get(s, 0) < time.monotonic()]
        if not slugs:
            self.halt.wait(0.2)
            return
        slug = self.rng.choice(slugs)
        operation: Callable[[str], str | None] = getattr(self, f"op_{kind}")
        try:
            outcome = operation(slug)
        except (ActionRefused, IncompleteBuild) as exc:
            self.ops.add(f"refused:{kind}", str(exc)[:120])
        except Exception as exc:
            self.ops.add(f"error:{kind}", f"{type(exc).__name__}: {exc}"[:300])
            connection.close()  # a fresh connection for the next operation
        else:
            if outcome is not None:
                self.ops.add(f"{outcome}:{kind}")
        self.halt.wait(self.rng.uniform(0.15, 0.6))

    # Each op returns "ok", "refused" (a clear 4xx or an action refused) or None (not
    # applicable now: nothing to do); unexpected answers are counted as errors.

    def _api_outcome(self, kind: str, status: int, body: bytes) -> str:
        if status < 400:
            return "ok"
        if status < 500:
            self.ops.add(f"refused:{kind}", f"{status} {body[:160]!r}")
            return "counted"
        raise RuntimeError(f"HTTP {status}: {body[:300]!r}")

    def _upload(self, slug: str, key: str, groups: list[str] | None, kind: str) -> str:
        revision = Revision.objects.filter(document__kb__slug=slug, document__key=key).count() + 1
        name, content = document_text(self.rng, key, revision)
        data: dict[str, Any] = {"key": key, "file": SimpleUploadedFile(name, content)}
        if groups is not None:
            data["title"] = key
            if groups:
                data["access_groups"] = groups
            self.ledger.created(key, groups)  # before the document can possibly be seen
        response = self.client.post(
            f"/api/v1/kbs/{slug}/documents/",
            data,
            headers={"Idempotency-Key": uuid.uuid4().hex},
            secure=True,
        )
        outcome = self._api_outcome(kind, response.status_code, response.content)
        if response.status_code == 201:
            self.uploads_ok[key] += 1
        return outcome

    def _documents(self, slug: str, *, deleted: bool) -> list[Document]:
        return list(
            Document.objects.filter(
                kb=self.world.kbs[slug], deleted_at__isnull=not deleted, purged_at__isnull=True
            )
        )

    def op_upload(self, slug: str) -> str | None:
        key = f"{slug}-{len(self.keys[slug])}"
        self.keys[slug].append(key)
        groups = ["staff"] if self.rng.random() < 0.35 else []
        return self._upload(slug, key, groups, "upload")

    def op_revision(self, slug: str) -> str | None:
        documents = self._documents(slug, deleted=False)
        if not documents:
            return self.op_upload(slug)
        return self._upload(slug, self.rng.choice(documents).key, None, "revision")

    def op_delete(self, slug: str) -> str | None:
        documents = self._documents(slug, deleted=False)
        if len(documents) < 4:
            return None
        document = self.rng.choice(documents)
        response = self.client.delete(f"/api/v1/documents/{document.pk}", secure=True)
        if response.status_code == 204:
            self.ledger.delete_returned(document.key, time.time())
        return self._api_outcome("delete", response.status_code, response.content)

    def op_restore(self, slug: str) -> str | None:
        documents = self._documents(slug, deleted=True)
        if not documents:
            return None
        document = self.rng.choice(documents)
        self.ledger.restore_started(document.key, time.time())
        services.document_restore(document_id=document.pk, actor=self.world.admin, reason="soak")
        return "ok"

    def _live_build_id(self, document_id: int, version_id: int | None) -> int | None:
        return (
            Publication.objects.filter(document_id=document_id, index_version_id=version_id)
            .values_list("build_id", flat=True)
            .first()
        )

    def op_approve(self, slug: str) -> str | None:
        kb = KnowledgeBase.objects.get(slug="gated", tenant=self.world.tenant)
        ready = list(
            Build.objects.filter(
                kb=kb,
                index_version_id=kb.active_index_version_id,
                state=Build.State.READY,
                document__deleted_at__isnull=True,
                revision__number=F("document__desired_revision"),
            )
        )
        if not ready:
            return None
        build = self.rng.choice(ready)
        services.build_approve(
            build_id=build.pk,
            actor=self.world.admin,
            reason="soak",
            expected_live_build_id=self._live_build_id(build.document_id, build.index_version_id),
        )
        return "ok"

    def op_rollback(self, slug: str) -> str | None:
        kb = KnowledgeBase.objects.get(pk=self.world.kbs[slug].pk)
        earlier = list(
            Build.objects.filter(
                kb=kb,
                index_version_id=kb.active_index_version_id,
                state=Build.State.SUPERSEDED,
                collected_at__isnull=True,
                verified_at__isnull=False,
                document__deleted_at__isnull=True,
            ).select_related("document")[:200]
        )
        if not earlier:
            return None
        build = self.rng.choice(earlier)
        live = self._live_build_id(build.document_id, build.index_version_id)
        start = time.time()
        try:
            services.document_rollback(
                document_id=build.document_id,
                build_id=build.pk,
                actor=self.world.admin,
                reason="soak",
                expected_live_build_id=live,
            )
        finally:
            self.ledger.rewind(build.document.key, start, time.time())
        return "ok"

    def _quiet(self, slug: str) -> None:
        if self.quiet.get(slug, 0) < time.monotonic() - 60:  # not again right after a pause
            self.quiet[slug] = time.monotonic() + self.QUIET_SECONDS

    def _swap_when_covered(self, slug: str) -> None:
        """While a knowledge base is quiet, swap (or roll the version back) as soon as the
        version to serve covers it."""
        kb = KnowledgeBase.objects.get(pk=self.world.kbs[slug].pk)
        swap = IndexVersion.objects.filter(kb=kb, state=IndexVersion.State.BUILDING).exists()
        kind = "swap" if swap else "version_rollback"
        try:
            if getattr(self, f"op_{kind}")(slug) == "ok":
                self.ops.add(f"ok:{kind}")
        except (ActionRefused, IncompleteBuild) as exc:
            self.ops.add(f"refused:{kind}", str(exc)[:120])

    def op_swap(self, slug: str) -> str | None:
        """Now and then a new index version; swap to it once it covers the knowledge base
        (pausing new work there for a while so that it can)."""
        kb = KnowledgeBase.objects.get(pk=self.world.kbs[slug].pk)
        building = (
            IndexVersion.objects.filter(kb=kb, state=IndexVersion.State.BUILDING)
            .exclude(pk=kb.active_index_version_id or 0)
            .order_by("-number")
            .first()
        )
        if building is not None:
            if services.index_version_coverage_gaps(version=building):
                self._quiet(slug)
                return None
            services.index_version_activate(
                version_id=building.pk,
                actor=self.world.admin,
                reason="soak swap",
                expected_active_id=kb.active_index_version_id,
            )
            self.quiet.pop(slug, None)
            return "ok"
        if time.monotonic() - self.version_created_at.get(slug, -1e9) < 75:
            return None
        self.version_created_at[slug] = time.monotonic()
        active = kb.active_index_version
        assert active is not None
        services.index_version_create(
            kb_id=kb.pk,
            provider=active.provider,
            model=active.model,
            dimensions=active.dimensions,
            chunk_size=self.rng.choice([500, 800]),
            chunk_overlap=50,
            actor=self.world.admin,
        )
        self.ops.add("ok:version_create")
        return None

    def op_version_rollback(self, slug: str) -> str | None:
        kb = KnowledgeBase.objects.get(pk=self.world.kbs[slug].pk)
        previous = (
            IndexVersion.objects.filter(kb=kb, state=IndexVersion.State.RETIRED)
            .order_by("-retired_at")
            .first()
        )
        if previous is None:
            return None
        if services.index_version_coverage_gaps(version=previous):
            self._quiet(slug)
            return None
        services.index_version_rollback(kb_id=kb.pk, actor=self.world.admin, reason="soak")
        self.quiet.pop(slug, None)
        return "ok"


# --- the chaos -------------------------------------------------------------------------------


class Chaos(Loop):
    """Faults at random: SIGKILL and restart, SIGSTOP past the lease then SIGCONT, warm
    restarts, of the workers, the beat and Redis."""

    def __init__(self, services_: dict[str, Service], settings: Settings, rng: random.Random):
        super().__init__("chaos")
        self.services = services_
        self.rng = rng
        self.settings = settings
        self.faults = Tally()
        self.pending: list[tuple[float, str, Service]] = []  # (when, "start" | "resume", svc)
        self.restarts: list[threading.Thread] = []  # warm restarts under way
        self.next_fault = time.monotonic() + rng.uniform(3, 8)
        self.last_fault_at = 0.0

    def step(self) -> None:
        now = time.monotonic()
        for due in [p for p in self.pending if p[0] <= now]:
            self.pending.remove(due)
            self._undo(due[1], due[2])
        if now >= self.next_fault:
            self._fault()
            self.next_fault = now + self.rng.uniform(3, 9)
        self.halt.wait(0.1)

    def _undo(self, action: str, service: Service) -> None:
        if action == "resume":
            service.resume()
        else:
            service.start()

    def _fault(self) -> None:
        role = self.rng.choice(["worker", "worker", "beat", "redis"])
        self.restarts = [r for r in self.restarts if r.is_alive()]
        restarting = len(self.restarts)
        up = [
            s
            for s in self.services.values()
            if s.name.startswith(role) and s.up and not self._pending_for(s) and not restarting
        ]
        if not up:
            return
        service = self.rng.choice(up)
        kind = self.rng.choice(["kill", "kill", "stop", "restart"] if role == "worker" else
                               ["kill", "stop"])  # fmt: skip
        lease_out = self.settings.lease_ttl + self.settings.sweep_interval
        if kind == "kill":
            service.kill()
            self.pending.append((time.monotonic() + self.rng.uniform(0.5, 5), "start", service))
        elif kind == "stop":
            service.pause()
            pause = (
                self.rng.uniform(lease_out + 1, lease_out + 6)
                if role == "worker"
                else self.rng.uniform(2, 8)
            )
            self.pending.append((time.monotonic() + pause, "resume", service))
        else:
            restart = threading.Thread(target=self._restart, args=(service,), daemon=True)
            self.restarts.append(restart)
            restart.start()
        self.faults.add(f"{role}_{kind}")
        self.last_fault_at = time.time()

    def _restart(self, service: Service) -> None:
        service.terminate(timeout=30)
        service.start()

    def _pending_for(self, service: Service) -> bool:
        return any(p[2] is service for p in self.pending)

    def stop(self) -> None:
        """Stop injecting, undo every fault still in force, and have every service up."""
        super().stop()
        for restart in self.restarts:
            restart.join(60)
        for _, action, service in sorted(self.pending, key=lambda p: p[0]):
            self._undo(action, service)
        self.pending.clear()
        for service in self.services.values():
            if service.stopped:
                service.resume()
            service.start(wait=60)


# --- the searchers ---------------------------------------------------------------------------


def publication_facts(build_ids: set[int]) -> tuple[set[int], set[int]]:
    """Of these builds: which were ever made live, and which are failed."""
    if not build_ids:
        return set(), set()
    published = set(
        PublicationEvent.objects.filter(build_id__in=build_ids, action__in=PUBLISHING)
        .values_list("build_id", flat=True)
        .distinct()
    )
    failed = set(
        Build.objects.filter(pk__in=build_ids, state=Build.State.FAILED).values_list(
            "pk", flat=True
        )
    )
    return published, failed


class Searcher(Loop):
    answers: Tally


class ApiSearcher(Searcher):
    """Searches through the API with one key; every result set goes to the checker."""

    def __init__(
        self,
        name: str,
        key: str,
        groups: frozenset[str],
        kbs: list[str],
        checker: Checker,
        rng: random.Random,
    ) -> None:
        super().__init__(name)
        self.client = api_client(key)
        self.groups = groups
        self.kbs = kbs
        self.checker = checker
        self.rng = rng
        self.answers = Tally()

    def step(self) -> None:
        body = {
            "kb": self.rng.choice(self.kbs),
            "query": " ".join(self.rng.sample(WORDS, self.rng.randint(1, 3))),
            "top_k": 50,
            "mode": self.rng.choice(MODES),
        }
        sent = time.time()
        response = self.client.post(
            "/api/v1/search", body, content_type="application/json", secure=True
        )
        received = time.time()
        self.answers.add(str(response.status_code))
        if response.status_code == 200:
            hits = tuple(
                Hit(h["document_key"], int(h["build_id"]), int(h["revision"]))
                for h in response.json()["hits"]
            )
            published, failed = publication_facts({h.build_id for h in hits})
            self.checker.check(
                ResultSet(self.name, self.groups, sent, received, hits),
                published=published,
                failed=failed,
            )
        else:
            self.answers.add(f"body:{response.status_code}", response.content[:200].decode())
        self.halt.wait(0.02)


SNAPSHOT_CHECK = """
SELECT b.id, b.state, b.expected_chunk_count, d.deleted_at IS NOT NULL,
       EXISTS (SELECT 1 FROM kb_publication p
               WHERE p.document_id = b.document_id AND p.build_id = b.id
                 AND p.index_version_id = k.active_index_version_id),
       (SELECT count(*) FROM kb_chunk c WHERE c.build_id = b.id)
  FROM kb_build b
  JOIN kb_document d ON d.id = b.document_id
  JOIN kb_knowledgebase k ON k.id = b.kb_id
 WHERE b.id = ANY(%s)
"""


class SnapshotSearcher(Searcher):
    """Searches through the search service in a repeatable-read snapshot and checks, in that
    same snapshot, that each hit's build is the live, complete build of a document that is not
    deleted, in the active index version; every result set also goes to the checker."""

    def __init__(self, world: World, checker: Checker, rng: random.Random) -> None:
        super().__init__("snapshot")
        self.world = world
        self.checker = checker
        self.rng = rng
        self.answers = Tally()
        self.principal = Principal(
            tenant_id=world.tenant.pk, kb_ids=None, access_groups=frozenset(), all_groups=True
        )

    def step(self) -> None:
        kb_slug = self.rng.choice(list(self.world.kbs))
        query = " ".join(self.rng.sample(WORDS, self.rng.randint(1, 3)))
        sent = time.time()
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                kb = KnowledgeBase.objects.select_related("active_index_version").get(
                    tenant=self.world.tenant, slug=kb_slug
                )
                result = search(
                    principal=self.principal,
                    kb=kb,
                    query=query,
                    top_k=50,
                    mode=self.rng.choice(MODES),
                )
                hits = tuple(Hit(h.document_key, h.build_id, h.revision) for h in result.hits)
                build_ids = {h.build_id for h in hits}
                with connection.cursor() as cursor:
                    cursor.execute(SNAPSHOT_CHECK, [sorted(build_ids)])
                    rows = cursor.fetchall()
                published, failed = publication_facts(build_ids)
        except Exception as exc:
            self.answers.add("error", f"{type(exc).__name__}: {exc}"[:300])
            connection.close()
            self.halt.wait(0.5)
            return
        received = time.time()
        self.answers.add("200")
        found = self.checker.check(
            ResultSet(self.name, None, sent, received, hits), published=published, failed=failed
        )
        where = f"snapshot at {sent:.3f}"
        extra = []
        for build_id, state, expected, deleted, live, chunks in rows:
            if not live or state != Build.State.LIVE:
                extra.append(f"{where}: build {build_id} ({state}) is not the live build")
            if chunks != expected:
                extra.append(f"{where}: build {build_id} has {chunks} of {expected} chunks")
            if deleted:
                extra.append(f"{where}: build {build_id}'s document is deleted")
        if len(rows) != len(build_ids):
            extra.append(f"{where}: builds {sorted(build_ids)} not all found")
        self.checker.record(extra)
        del found
        self.halt.wait(0.05)


# --- convergence and the report ----------------------------------------------------------------


def _due() -> Q:
    soon = timezone.now() + timedelta(seconds=120)
    return Q(available_at__isnull=True) | Q(available_at__lte=soon)


def convergence_state(world: World) -> dict[str, Any]:
    """What is still on its way: due tasks and events, documents not yet at their desired
    revision in their knowledge base's active index version (or failed there)."""
    tasks = IngestionTask.objects.filter(_due(), status__in=OPEN_TASK).count()
    events = OutboxEvent.objects.filter(
        _due(), published_at__isnull=True, dead_at__isnull=True
    ).count()
    behind: list[str] = []
    failed: list[str] = []
    for kb in KnowledgeBase.objects.filter(tenant=world.tenant):
        live = dict(
            Publication.objects.filter(index_version_id=kb.active_index_version_id).values_list(
                "document_id", "build__revision__number"
            )
        )
        desired_failed = set(
            Build.objects.filter(
                kb=kb,
                index_version_id=kb.active_index_version_id,
                state=Build.State.FAILED,
                revision__number=F("document__desired_revision"),
            ).values_list("document_id", flat=True)
        )
        for document in Document.objects.filter(
            kb=kb, deleted_at__isnull=True, desired_revision__isnull=False
        ):
            if live.get(document.pk) == document.desired_revision:
                continue
            (failed if document.pk in desired_failed else behind).append(document.key)
    return {"tasks": tasks, "events": events, "behind": behind, "failed": failed}


def open_tasks(limit: int = 10) -> list[str]:
    """The due tasks still open, with what the outbox knows of their messages."""
    lines = []
    for task in IngestionTask.objects.filter(_due(), status__in=OPEN_TASK).order_by("id")[:limit]:
        sent = task.events.filter(published_at__isnull=False).order_by("-published_at").first()
        lines.append(
            f"task {task.pk} {task.status}, attempt {task.attempt}, updated "
            f"{task.updated_at:%H:%M:%S}; last message sent "
            f"{f'{sent.published_at:%H:%M:%S}' if sent else 'never'}"
        )
    return lines


def approve_waiting(world: World) -> int:
    """The end of the soak approves what still waits for approval, so every document can reach
    its desired revision."""
    approved = 0
    for build in Build.objects.filter(
        kb__tenant=world.tenant, state=Build.State.READY, document__deleted_at__isnull=True
    ).select_related("kb"):
        if build.index_version_id != build.kb.active_index_version_id:
            continue
        with contextlib.suppress(ActionRefused, IncompleteBuild):
            services.build_approve(build_id=build.pk, actor=world.admin, reason="soak: converge")
            approved += 1
    return approved


def converge(world: World, timeout: float) -> tuple[float | None, dict[str, Any]]:
    started = time.monotonic()
    while True:
        approve_waiting(world)
        state = convergence_state(world)
        if not (state["tasks"] or state["events"] or state["behind"]):
            return time.monotonic() - started, state
        if time.monotonic() - started > timeout:
            return None, state
        time.sleep(1.0)


def lost_revisions(driver: Driver) -> list[str]:
    """Uploads answered 201 whose revision is not in the database."""
    counts = dict(
        Revision.objects.filter(document__kb__tenant__slug="soak")
        .values_list("document__key")
        .annotate(n=Count("id"))
    )
    return [
        f"{key}: {n} uploads accepted, {counts.get(key, 0)} revisions"
        for key, n in sorted(driver.uploads_ok.items())
        if counts.get(key, 0) < n
    ]


def kb_verify() -> tuple[bool, str]:
    out = io.StringIO()
    try:
        call_command("kb_verify", stdout=out)
    except Exception as exc:
        return False, str(exc)
    return True, out.getvalue().strip()


def by_kind(tally: Tally, prefix: str) -> str:
    items = sorted(
        (k.removeprefix(prefix), n) for k, n in tally.counts.items() if k.startswith(prefix)
    )
    return ", ".join(f"{k} {n}" for k, n in items) or "none"


def run(settings: Settings, processes: dict[str, Service]) -> int:
    rng = random.Random(settings.seed)
    print(f"[soak] seed {settings.seed}; logs in {settings.logs}", flush=True)
    world = world_create()
    ledger = Ledger()
    checker = Checker(ledger)
    driver = Driver(world, ledger, random.Random(rng.random()))
    chaos = Chaos(processes, settings, random.Random(rng.random()))
    searchers: list[Searcher] = [
        ApiSearcher(
            "api-staff",
            world.staff_key,
            frozenset({"staff"}),
            list(world.kbs),
            checker,
            random.Random(rng.random()),
        ),
        ApiSearcher(
            "api-public",
            world.public_key,
            frozenset(),
            list(world.kbs),
            checker,
            random.Random(rng.random()),
        ),
        SnapshotSearcher(world, checker, random.Random(rng.random())),
    ]
    threads: list[Loop] = [driver, chaos, *searchers]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    deadline = started + settings.minutes * 60
    while time.monotonic() < deadline and not any(t.crashed for t in threads):
        time.sleep(min(30.0, max(0.0, deadline - time.monotonic())))
        print(
            f"[soak] {time.monotonic() - started:5.0f}s: {driver.ops.total('ok:')} operations, "
            f"{chaos.faults.total()} faults, {checker.checked} result sets checked, "
            f"{len(checker.violations)} violations",
            flush=True,
        )
    driver.stop()
    chaos.stop()
    chaos_ended = time.time()
    print("[soak] chaos stopped; every process up; converging", flush=True)
    took, state = converge(world, settings.converge_timeout)
    for searcher in searchers:
        searcher.stop()
    crashed = {t.name: t.crashed for t in threads if t.crashed}
    lost = lost_revisions(driver)
    verified, verify_report = kb_verify()

    documents = Document.objects.filter(kb__tenant=world.tenant)
    anomalies = Counter(
        AuditEvent.objects.filter(kind__startswith="anomaly:").values_list("kind", flat=True)
    )
    dead = IngestionTask.objects.filter(status=IngestionTask.Status.DEAD).count()
    retried = IngestionTask.objects.filter(attempt__gt=1).count()
    expired = Counter(
        AuditEvent.objects.filter(kind="lease_expired").values_list("action", flat=True)
    )
    answers = Tally()
    for searcher in searchers:
        for kind, n in searcher.answers.counts.items():
            if not kind.startswith("body:"):
                answers.counts[f"{searcher.name} {kind}"] += n
    print("\n=== soak report ===")
    print(f"seed {settings.seed}; {settings.minutes:g} min of chaos (last fault "
          f"{chaos_ended - chaos.last_fault_at:.1f}s before it stopped); 2 workers, beat, Redis; "
          f"lease {settings.lease_ttl:g}s, sweeper every {settings.sweep_interval:g}s")  # fmt: skip
    print(f"operations: {driver.ops.total('ok:')} ({by_kind(driver.ops, 'ok:')})")
    print(f"  refused: {driver.ops.total('refused:')} ({by_kind(driver.ops, 'refused:')})")
    print(f"  errors: {driver.ops.total('error:')} ({by_kind(driver.ops, 'error:')})")
    print(f"faults: {chaos.faults.total()} ({by_kind(chaos.faults, '')})")
    print(f"result sets checked: {checker.checked} ({by_kind(answers, '')}), "
          f"{checker.hits} hits in them")  # fmt: skip
    print(f"violations: {len(checker.violations)}")
    for violation in checker.violations[:20]:
        print(f"  {violation}")
    if took is None:
        print(f"NOT converged within {settings.converge_timeout:g}s: {state['tasks']} tasks, "
              f"{state['events']} events due; behind: {state['behind'][:20]}")  # fmt: skip
        for line in open_tasks():
            print(f"  still open: {line}")
    else:
        print(f"converged {took:.1f}s after the chaos stopped (no task or event due, every "
              "document at its desired revision in the active index version)")  # fmt: skip
    print(
        f"documents: {documents.count()} ({documents.filter(deleted_at__isnull=False).count()} "
        f"deleted); revisions {Revision.objects.filter(document__kb__tenant=world.tenant).count()}"
        f"; builds {Build.objects.filter(kb__tenant=world.tenant).count()}; index versions "
        f"{IndexVersion.objects.filter(kb__tenant=world.tenant).count()}"
    )
    print(f"desired revision failed: {len(state['failed'])} {state['failed'][:10]}; "
          f"tasks dead-lettered: {dead}; uploads lost: {len(lost)} {lost[:5]}")  # fmt: skip
    print(f"tasks run more than once: {retried}; leases expired and swept: {dict(expired)}")
    print(f"anomalies recorded by the reconciler: {dict(anomalies) or 'none'}")
    for note in [*driver.ops.notes, *[n for s in searchers for n in s.answers.notes]][:15]:
        print(f"  note: {note}")
    for name, trace in crashed.items():
        print(f"thread {name} crashed:\n{trace}")
    print(f"kb_verify: {verify_report}")
    ok = not checker.violations and took is not None and verified and not lost and not crashed
    print(f"=== soak {'passed' if ok else 'FAILED'} ===", flush=True)
    return 0 if ok else 1
