"""The soak itself (docs/SOAK.md): a driver, a chaos monkey and three searchers against real
processes, then convergence, a report and kb_verify. Runs in a process whose environment
`tests.soak.__main__` prepared (the soak's database, Redis, queue, short leases) before Django
was set up."""

from __future__ import annotations

import contextlib
import io
import random
import time
from collections import Counter
from datetime import timedelta
from typing import Any

from django.core.management import call_command
from django.db.models import Count, F, Q
from django.utils import timezone

from kb.completeness import IncompleteBuild
from kb.models import Build, Document, IndexVersion, KnowledgeBase, Publication, Revision
from kb.services.base import ActionRefused
from kb.services.publication import build_approve
from tests.soak.chaos import Chaos
from tests.soak.checker import Checker, Ledger
from tests.soak.driver import Driver
from tests.soak.processes import Service
from tests.soak.searchers import ApiSearcher, Searcher, SnapshotSearcher
from tests.soak.world import Loop, Settings, Tally, World, world_create
from work.models import AuditEvent, IngestionTask, OutboxEvent

OPEN_TASK = ("queued", "running", "retry_wait")


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
            build_approve(build_id=build.pk, actor=world.admin, reason="soak: converge")
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
