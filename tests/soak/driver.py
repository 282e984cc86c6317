"""The soak's driver: random operations through the API and the admin's services."""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.db.models import F

from kb.completeness import IncompleteBuild
from kb.models import Build, Document, IndexVersion, KnowledgeBase, Publication, Revision
from kb.services.base import ActionRefused
from kb.services.documents import document_restore
from kb.services.index_versions import (
    index_version_activate,
    index_version_coverage_gaps,
    index_version_create,
    index_version_rollback,
)
from kb.services.publication import build_approve, document_rollback
from tests.soak.checker import Ledger
from tests.soak.world import Loop, Tally, World, api_client, document_text


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
        document_restore(document_id=document.pk, actor=self.world.admin, reason="soak")
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
        build_approve(
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
            document_rollback(
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
            if index_version_coverage_gaps(version=building):
                self._quiet(slug)
                return None
            index_version_activate(
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
        index_version_create(
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
        if index_version_coverage_gaps(version=previous):
            self._quiet(slug)
            return None
        index_version_rollback(kb_id=kb.pk, actor=self.world.admin, reason="soak")
        self.quiet.pop(slug, None)
        return "ok"
