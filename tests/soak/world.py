"""What the soak's threads share: its knowledge bases and keys, generated documents, counters,
and the thread loop."""

from __future__ import annotations

import random
import threading
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from kb.models import KnowledgeBase, Tenant, TenantMembership
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import api_key_create

WORDS = [
    "lease", "outbox", "relay", "sweeper", "beat", "worker", "chunk", "build", "revision",
    "publish", "pointer", "snapshot", "approval", "rollback", "index", "version", "vector",
    "keyword", "hybrid", "tenant", "group", "delete", "restore", "retention", "purge", "redis",
    "postgres", "heartbeat", "fence", "candidate", "switch", "manifest", "ordinal", "embedding",
    "provider", "breaker", "reconciler", "anomaly", "verify", "garbage", "harbour", "lantern",
    "meadow", "orchard", "quartz", "saddle", "timber", "velvet", "willow",
]  # fmt: skip
MODES = ("keyword", "vector", "hybrid")


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
        "open": knowledge_base_create(tenant=tenant, name="Open", slug="open"),
        "gated": knowledge_base_create(
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
