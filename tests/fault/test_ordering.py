"""Fault matrix rows F-O1, F-D1 and F-X1: late and duplicate events, a delete racing a build, and
concurrent admin actions, with real worker processes, a concurrent searcher, convergence and a
clean kb_verify.

F-X1's second half ("concurrent KB swaps") is not covered here: index-version swaps are not built
yet. The retry of a deadlock victim is exercised with a foreign session that takes the locks in
the wrong order, because no pair of Canon's own transactions can deadlock (one lock order).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now

from ingestion.models import StageResult
from ingestion.tasks import run_task
from kb import locks
from kb.models import (
    Build,
    Chunk,
    Document,
    KnowledgeBase,
    Publication,
    PublicationEvent,
    Tenant,
)
from kb.services.base import ActionRefused
from kb.services.documents import document_delete, document_restore
from kb.services.index_versions import knowledge_base_create
from kb.services.publication import build_approve
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.conftest import Worker, wait_for
from tests.fault.harness import (
    FAULT_LEASE_TTL,
    Searcher,
    assert_verified,
    converge,
    live_revision,
    manage_subprocess,
    paragraphs,
    resume,
    upload,
    wait_for_marker,
)
from work.models import AuditEvent, IngestionTask, OutboxEvent

pytestmark = pytest.mark.integration

WORKER_ENV = {"CANON_LEASE_TTL_SECONDS": FAULT_LEASE_TTL, "CANON_CHUNK_WRITE_BATCH": "5"}
STALE_VIEW = "The live version changed since you opened this page; review it again."

WorkerFactory = Callable[..., Worker]
SearcherFactory = Callable[..., "TimelineSearcher"]


# --- helpers -------------------------------------------------------------------------------


def build_of(document: Document, revision: int) -> Build:
    return Build.objects.select_related("revision").get(
        document=document, revision__number=revision
    )


def task_of(document: Document, revision: int) -> IngestionTask:
    return IngestionTask.objects.get(build__document=document, build__revision__number=revision)


def chunk_ids(build: Build) -> list[tuple[int, str]]:
    return sorted(Chunk.objects.filter(build=build).values_list("id", "chunk_key"))


def events_of(document: Document, after: int = 0) -> list[tuple[str, int | None, int | None]]:
    return list(
        PublicationEvent.objects.filter(document=document, pk__gt=after)
        .order_by("pk")
        .values_list("action", "build_id", "previous_build_id")
    )


def visible(kb: KnowledgeBase) -> dict[str, set[int]]:
    """Which documents (and revisions) a direct search returns right now."""
    principal = Principal(
        tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
    )
    found: dict[str, set[int]] = {}
    for hit in search(
        principal=principal, kb=kb, query="paragraph", top_k=500, mode="keyword"
    ).hits:
        found.setdefault(hit.document_key, set()).add(hit.revision)
    return found


def deliver(task: IngestionTask) -> str:
    """Send one run_task message to the workers' queue, as the relay would; return its id."""
    return str(run_task.apply_async(args=(task.pk,), retry=False).id)


_SUCCEEDED = re.compile(
    r"Task ingestion\.tasks\.run_task\[([0-9a-f-]+)\] succeeded in \S+: '([^']*)'"
)


def message_results(
    workers: list[Worker], message_ids: list[str], timeout: float = 60.0
) -> dict[str, str]:
    """Wait until every message was executed by one of `workers`; return id -> return value."""
    deadline = time.monotonic() + timeout
    while True:
        found = {mid: value for w in workers for mid, value in _SUCCEEDED.findall(w.log())}
        if all(mid in found for mid in message_ids):
            return {mid: found[mid] for mid in message_ids}
        if time.monotonic() > deadline:
            logs = "\n".join(w.log()[-3000:] for w in workers)
            pytest.fail(f"messages {set(message_ids) - set(found)} never finished:\n{logs}")
        time.sleep(0.1)


def wait_stopped(pid: int, timeout: float = 30.0) -> None:
    """Wait until `pid` is really frozen (state T), not only about to stop itself."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        if time.monotonic() > deadline:
            pytest.fail(f"process {pid} wrote its pause marker but never stopped")
        time.sleep(0.05)


def release(worker: Worker) -> None:
    """Resume a possibly SIGSTOPped worker group, so it can be stopped normally."""
    if worker.proc.poll() is None:
        os.killpg(worker.pid, signal.SIGCONT)


def make_due(task: IngestionTask) -> None:
    """Stand-in for the clock reaching a delayed task's time: it and its outbox event are due."""
    IngestionTask.objects.filter(pk=task.pk).update(available_at=Now())
    OutboxEvent.objects.filter(task=task, published_at__isnull=True).update(available_at=Now())


def ready_build(document: Document, revision: int) -> Build:
    """Wait (running the beat's jobs) until the build of `revision` waits for approval."""
    converge(
        lambda: Build.objects.filter(
            document=document, revision__number=revision, state=Build.State.READY
        ).exists(),
        what=f"revision {revision} ready for approval",
    )
    return build_of(document, revision)


@dataclass(frozen=True)
class Observation:
    started: float
    finished: float
    keys: frozenset[str]


@dataclass(eq=False)
class TimelineSearcher(Searcher):
    """A Searcher that also records when each search started and ended (monotonic clock) and
    which documents it returned, so a test can ask what searches that began after a commit saw."""

    timeline: list[Observation] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._keys: set[str] = set()

    def _search_once(self, query: str, mode: str) -> None:
        started = time.monotonic()
        self._keys = set()
        super()._search_once(query, mode)
        self.timeline.append(Observation(started, time.monotonic(), frozenset(self._keys)))

    def _check_build(self, key: str, build_id: int) -> None:
        self._keys.add(key)
        super()._check_build(key, build_id)

    def saw(self, key: str, *, started_after: float, finished_before: float = float("inf")) -> int:
        """How many searches that started after `started_after` (and finished before
        `finished_before`) returned `key`."""
        return sum(
            1
            for o in self.timeline
            if o.started >= started_after and o.finished <= finished_before and key in o.keys
        )

    def searches_in(self, *, started_after: float, finished_before: float = float("inf")) -> int:
        return sum(
            1 for o in self.timeline if o.started >= started_after and o.finished <= finished_before
        )


@pytest.fixture
def searching(worker_factory: WorkerFactory) -> Iterator[SearcherFactory]:
    """Start concurrent searchers; each is stopped at teardown even if the test failed midway
    (before the workers stop and the test database is flushed)."""
    started: list[TimelineSearcher] = []

    def start(kb: KnowledgeBase, queries: list[str]) -> TimelineSearcher:
        searcher = TimelineSearcher(kb=kb, queries=queries)
        searcher.start()
        started.append(searcher)
        return searcher

    yield start
    for searcher in started:
        if searcher.is_alive():
            searcher.stop()


def let_search(searcher: Searcher, n: int = 10, timeout: float = 30.0) -> None:
    """Let the searcher run `n` more searches (it must observe the current state too)."""
    target = searcher.searches + n
    deadline = time.monotonic() + timeout
    while searcher.searches < target:
        if time.monotonic() > deadline:
            pytest.fail(f"the searcher stalled at {searcher.searches} searches")
        time.sleep(0.05)


# Code run by a long-lived contender process, one round after another: wait for the round's call,
# make sure the connection is open and report its backend pid, wait for the round's barrier file
# (polled every 0.5 ms), wait a random 0..`jitter` seconds so that no contender is always first,
# call the service, and write the outcome: 0 (it won) or 3 (ActionRefused), with the wall-clock span
# of the call. Any lock through kb.locks that fails is recorded with its SQLSTATE, so a deadlock
# (and hence a retry) shows. Any other exception ends the process with its traceback.
CONTENDER_CODE = """
import os, random, sys, time
from pathlib import Path
from django.db import connection
from kb import locks
from kb.services import publication as services
from kb.services.base import ActionRefused

JITTER = __JITTER__
workdir = Path(__WORKDIR__)
name = __NAME__
conflicts = []

def _probe(take):
    def probed(pk):
        try:
            return take(pk)
        except Exception as exc:
            sqlstate = getattr(exc.__cause__, 'sqlstate', None)
            conflicts.append(f'CONFLICT {sqlstate} {type(exc).__name__}')
            raise
    return probed

locks.lock_document = _probe(locks.lock_document)
locks.lock_build = _probe(locks.lock_build)

def _write(path, text):
    tmp = path.with_name(path.name + '.tmp')
    tmp.write_text(text)
    os.replace(tmp, path)

def _wait(path, poll):
    deadline = time.monotonic() + 300
    while not path.exists():
        if time.monotonic() > deadline:
            print('timed out waiting for', path, flush=True)
            sys.exit(2)
        time.sleep(poll)

round_number = 0
while True:
    round_number += 1
    call_file = workdir / f'{name}-{round_number}.call'
    _wait(call_file, 0.02)
    call = call_file.read_text()
    if call == 'stop':
        sys.exit(0)
    with connection.cursor() as cursor:
        cursor.execute('SELECT pg_backend_pid()')
        backend_pid = cursor.fetchone()[0]
    _write(workdir / f'{name}-{round_number}.ready', str(backend_pid))
    _wait(workdir / f'go-{round_number}', 0.0005)
    time.sleep(random.uniform(0, JITTER))
    conflicts.clear()
    started = time.time()
    try:
        result = eval(call, {'services': services})
        code = 0
        outcome = f'WON: {result.outcome.value} {result.build_id} {result.previous_build_id}'
    except ActionRefused as exc:
        code, outcome = 3, f'REFUSED: {exc}'
    finished = time.time()
    print(f'round {round_number}: {outcome}', flush=True)
    lines = [str(code), f'{started} {finished}', outcome, *conflicts]
    _write(workdir / f'{name}-{round_number}.result', '\\n'.join(lines))
"""


@dataclass(frozen=True)
class Outcome:
    code: int  # 0: the call won; 3: ActionRefused
    started: float
    finished: float
    line: str  # "WON: <outcome> <build> <previous build>" or "REFUSED: <message>"
    conflicts: list[str]


class Contenders:
    """Long-lived `manage.py shell` processes, one per name, each calling one service per round;
    all calls of a round are released together by one barrier file. Started once, so a round
    costs no process start-up."""

    def __init__(self, names: list[str], workdir: Path, jitter: float = 0.05) -> None:
        workdir.mkdir()
        self.workdir = workdir
        self.round = 0
        self.procs = {
            name: manage_subprocess(
                code=CONTENDER_CODE.replace("__WORKDIR__", repr(str(workdir)))
                .replace("__NAME__", repr(name))
                .replace("__JITTER__", repr(jitter))
            )
            for name in names
        }

    def prepare(self, calls: dict[str, str]) -> dict[str, int]:
        """Hand each process its call (`services.<call>`); return each one's backend pid once
        all of them are connected and waiting at the barrier."""
        self.round += 1
        for name, call in calls.items():
            _write_atomically(self.workdir / f"{name}-{self.round}.call", f"services.{call}")
        return {name: int(self._wait(name, "ready").read_text()) for name in calls}

    def go(self) -> None:
        (self.workdir / f"go-{self.round}").touch()

    def results(self, names: list[str]) -> dict[str, Outcome]:
        outcomes = {}
        for name in names:
            code, span, said, *conflicts = self._wait(name, "result").read_text().split("\n")
            started, finished = map(float, span.split())
            outcomes[name] = Outcome(int(code), started, finished, said, conflicts)
        return outcomes

    def race(self, calls: dict[str, str]) -> dict[str, Outcome]:
        self.prepare(calls)
        self.go()
        return self.results(list(calls))

    def _wait(self, name: str, what: str, timeout: float = 120.0) -> Path:
        path = self.workdir / f"{name}-{self.round}.{what}"
        proc = self.procs[name]
        deadline = time.monotonic() + timeout
        while not path.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                out = proc.communicate()[0].decode(errors="replace")
                pytest.fail(f"contender {name} wrote no {what} in round {self.round}:\n{out}")
            time.sleep(0.01)
        return path

    def close(self) -> None:
        for name in self.procs:
            _write_atomically(self.workdir / f"{name}-{self.round + 1}.call", "stop")
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@pytest.fixture
def contenders(
    worker_factory: WorkerFactory, tmp_path: Path
) -> Iterator[Callable[[list[str]], Contenders]]:
    """Start contender processes; all are stopped at teardown, before the database is flushed."""
    started: list[Contenders] = []

    def start(names: list[str]) -> Contenders:
        group = Contenders(names, tmp_path / f"contenders-{len(started)}")
        started.append(group)
        return group

    yield start
    for group in started:
        group.close()


def approval_kb(tenant: Tenant) -> KnowledgeBase:
    return knowledge_base_create(
        tenant=tenant,
        name="Reviewed",
        slug=f"reviewed-{uuid.uuid4().hex[:6]}",
        require_approval=True,
    )


# --- F-O1 ----------------------------------------------------------------------------------


def test_f_o1_late_and_duplicate_events_never_move_the_pointer_back(
    worker_factory: WorkerFactory, searching: SearcherFactory, kb: KnowledgeBase, monkeypatch: Any
) -> None:
    workers = [worker_factory(pool="solo", **WORKER_ENV) for _ in range(2)]
    searcher = searching(kb, ["paragraph", "amber paragraph 2", "cedar paragraph 2"])
    # given three revisions of "policy" and two of "memo" whose messages are all held back: no
    # relay nudge, and their outbox events are marked sent, so only this test delivers them
    monkeypatch.setattr("work.outbox.relay_nudge", lambda: None)
    for tag in ("amber", "birch", "cedar"):
        policy = upload(kb, "policy", paragraphs(tag))
    for tag in ("delta", "ember"):
        memo = upload(kb, "memo", paragraphs(tag))
    assert OutboxEvent.objects.update(published_at=Now()) == 5
    assert (policy.desired_revision, memo.desired_revision) == (3, 2)
    tasks = {n: task_of(policy, n) for n in (1, 2, 3)}

    # when revision 3's message arrives first, twice at once (one per worker), and memo's
    # revision 1 arrives while its revision 2 is desired but nothing is live yet
    first = {
        "policy r3": deliver(tasks[3]),
        "policy r3 again": deliver(tasks[3]),
        "memo r1": deliver(task_of(memo, 1)),
    }
    done = message_results(workers, list(first.values()))
    # then one delivery of revision 3 publishes it, the other claims nothing
    assert sorted([done[first["policy r3"]], done[first["policy r3 again"]]]) == [
        "not_claimed",
        "published",
    ]
    assert done[first["memo r1"]] == "stale"
    assert live_revision(policy) == 3
    assert live_revision(memo) is None
    live = build_of(policy, 3)
    live_chunks = chunk_ids(live)
    assert live_chunks

    # when the messages of revisions 1 and 2 arrive late, among more duplicates of revision 3
    late = {
        "policy r1": deliver(tasks[1]),
        "policy r3 dup 1": deliver(tasks[3]),
        "policy r2": deliver(tasks[2]),
        "policy r3 dup 2": deliver(tasks[3]),
        "policy r3 dup 3": deliver(tasks[3]),
        "memo r2": deliver(task_of(memo, 2)),
        "memo r1 dup": deliver(task_of(memo, 1)),
    }
    done = message_results(workers, list(late.values()))
    converge(lambda: live_revision(memo) == 2, what="memo revision 2 live")
    let_search(searcher)
    searcher.stop()

    # then each late build was built in full but refused by the CAS; duplicates changed nothing
    assert {name: done[mid] for name, mid in late.items()} == {
        "policy r1": "stale",
        "policy r3 dup 1": "not_claimed",
        "policy r2": "stale",
        "policy r3 dup 2": "not_claimed",
        "policy r3 dup 3": "not_claimed",
        "memo r2": "published",
        "memo r1 dup": "not_claimed",
    }
    policy.refresh_from_db()
    assert live_revision(policy) == 3
    assert policy.desired_revision == 3
    for n in (1, 2):
        stale = build_of(policy, n)
        assert stale.state == Build.State.SUPERSEDED
        assert stale.error == "revision 3 was uploaded after this one"
        assert stale.chunks.count() == stale.expected_chunk_count  # complete, yet never live
    stale_memo = build_of(memo, 1)
    assert stale_memo.state == Build.State.SUPERSEDED
    assert stale_memo.error == "revision 2 was uploaded after this one"
    assert events_of(policy) == [("publish", live.pk, None)]
    assert events_of(memo) == [("publish", build_of(memo, 2).pk, None)]
    live.refresh_from_db()
    assert live.state == Build.State.LIVE
    assert chunk_ids(live) == live_chunks
    assert set(IngestionTask.objects.values_list("status", "attempt")) == {("succeeded", 1)}
    assert set(StageResult.objects.filter(task=tasks[3]).values_list("stage", "attempts")) == {
        ("parse", 1),
        ("chunk", 1),
        ("embed", 1),
        ("write", 1),
    }
    searcher.assert_clean()
    assert searcher.seen["policy"] == {3}
    assert searcher.seen["memo"] == {2}
    assert_verified()


# --- F-D1 ----------------------------------------------------------------------------------


def test_f_d1_document_deleted_while_its_new_revision_builds(
    worker_factory: WorkerFactory,
    searching: SearcherFactory,
    kb: KnowledgeBase,
    settings: Any,
    tmp_path: Path,
) -> None:
    markers = tmp_path / "markers"
    healthy = worker_factory(pool="solo", **WORKER_ENV)
    policy = upload(kb, "policy", paragraphs("alpha"))
    memo = upload(kb, "memo", paragraphs("delta"))
    converge(
        lambda: live_revision(policy) == 1 and live_revision(memo) == 1, what="revisions 1 live"
    )
    healthy.stop()
    searcher = searching(kb, ["paragraph", "alpha paragraph 4", "delta"])

    # given a worker frozen after building policy's revision 2, just before its switch (its
    # lease outlives the pause, so the frozen worker itself does the switch when it resumes)
    pausing = worker_factory(
        pool="solo",
        CANON_FAULT_PAUSE_AT="before_switch",
        CANON_FAULT_MARKER_DIR=str(markers),
        CANON_LEASE_TTL_SECONDS="30",
        CANON_CHUNK_WRITE_BATCH="5",
    )
    try:
        upload(kb, "policy", paragraphs("beta"))
        marker = wait_for_marker(markers, "paused_before_switch")
        paused_pid = int(marker.name.rsplit(".", 1)[1])
        assert paused_pid == pausing.pid
        wait_stopped(paused_pid)
        candidate = build_of(policy, 2)
        assert candidate.state == Build.State.BUILDING
        assert candidate.chunks.count() == candidate.expected_chunk_count
        assert visible(kb) == {"policy": {1}, "memo": {1}}

        # when the document is deleted in this process while the build waits to switch
        settings.DELETE_PURGE_DELAY_SECONDS = 0
        document_delete(document_id=policy.pk, reason="F-D1")
        delete_committed = time.monotonic()

        # then it is invisible from the delete's commit on; the other document still serves
        assert visible(kb) == {"memo": {1}}
        let_search(searcher)

        # when the worker resumes: its switch finds the document deleted; then the purge runs
        resume(paused_pid)
        converge(
            lambda: Document.objects.filter(pk=policy.pk, purged_at__isnull=False).exists(),
            what="policy purged",
        )
    finally:
        release(pausing)

    # then the finishing build was superseded unpublished, by the worker that built it
    candidate.refresh_from_db()
    assert candidate.state == Build.State.SUPERSEDED
    assert candidate.error == "the document was deleted before this build finished"
    task = IngestionTask.objects.get(build=candidate)
    assert (task.status, task.attempt) == (IngestionTask.Status.SUCCEEDED, 1)
    assert not AuditEvent.objects.filter(kind="lease_expired").exists()
    assert "succeeded in" in pausing.log() and ": 'stale'" in pausing.log()
    live_before = build_of(policy, 1)
    assert events_of(policy) == [
        ("publish", live_before.pk, None),
        ("delete", live_before.pk, None),
    ]
    # and the purge removed every chunk and the pointer; a restore is refused now
    policy.refresh_from_db()
    assert policy.deleted_at is not None and policy.purged_at is not None
    assert not Chunk.objects.filter(document=policy).exists()
    assert not Publication.objects.filter(document=policy).exists()
    purge = IngestionTask.objects.get(kind=IngestionTask.Kind.DELETE, document=policy)
    assert purge.status == IngestionTask.Status.SUCCEEDED
    with pytest.raises(ActionRefused, match="purged"):
        document_restore(document_id=policy.pk)

    # when another document is deleted with a long retention window and restored before purge
    settings.DELETE_PURGE_DELAY_SECONDS = 3600
    memo_chunks = chunk_ids(build_of(memo, 1))
    document_delete(document_id=memo.pk, reason="F-D1 restore")
    memo_delete_committed = time.monotonic()
    assert visible(kb) == {}
    let_search(searcher, n=5)
    memo_restore_started = time.monotonic()
    document_restore(document_id=memo.pk, reason="F-D1 restore")
    # then it serves again at once, the same build and chunks
    assert visible(kb) == {"memo": {1}}
    assert live_revision(memo) == 1
    assert chunk_ids(build_of(memo, 1)) == memo_chunks

    # and when its purge comes due (clock stand-in), the purge is a no-op: it was restored
    memo_purge = IngestionTask.objects.get(kind=IngestionTask.Kind.DELETE, document=memo)
    assert memo_purge.status == IngestionTask.Status.QUEUED
    make_due(memo_purge)
    converge(
        lambda: IngestionTask.objects.filter(
            pk=memo_purge.pk, status=IngestionTask.Status.SUCCEEDED
        ).exists(),
        what="memo's purge task done",
    )
    let_search(searcher)
    searcher.stop()
    memo.refresh_from_db()
    assert memo.deleted_at is None and memo.purged_at is None
    assert chunk_ids(build_of(memo, 1)) == memo_chunks
    assert visible(kb) == {"memo": {1}}
    assert "purged 0 chunks" in pausing.log()
    assert [a for a, _, _ in events_of(memo)] == ["publish", "delete", "restore"]

    searcher.assert_clean()
    assert searcher.seen["policy"] == {1}
    # every search that began after the delete committed missed the deleted document
    assert searcher.searches_in(started_after=delete_committed) >= 10
    assert searcher.saw("policy", started_after=delete_committed) == 0
    window = {"started_after": memo_delete_committed, "finished_before": memo_restore_started}
    assert searcher.searches_in(**window) >= 3
    assert searcher.saw("memo", **window) == 0
    assert searcher.saw("memo", started_after=memo_restore_started) > 0
    assert_verified()


# --- F-X1 ----------------------------------------------------------------------------------

ROUNDS = 5


def test_f_x1_concurrent_approve_and_rollback_have_exactly_one_winner(
    worker_factory: WorkerFactory,
    searching: SearcherFactory,
    contenders: Callable[[list[str]], Contenders],
    tenant: Tenant,
) -> None:
    worker_factory(pool="solo", **WORKER_ENV)
    admins = contenders(["approve", "rollback"])  # two processes, started once for all rounds
    kb = approval_kb(tenant)
    searcher = searching(kb, ["paragraph", "rev1 paragraph 3", "rev2 paragraph 3"])
    # given a knowledge base that requires approval: revision 1 approved live, then revision 2
    # approved live (revision 1 superseded, retained for rollback)
    document = upload(kb, "policy", paragraphs("rev1"))
    retained = ready_build(document, 1)
    build_approve(build_id=retained.pk, actor=None)
    upload(kb, "policy", paragraphs("rev2"))
    live = ready_build(document, 2)
    build_approve(build_id=live.pk, actor=None, expected_live_build_id=retained.pk)
    assert live_revision(document) == 2
    ever_live = {1, 2}
    report = []

    for round_number in range(1, ROUNDS + 1):
        # given a new revision built and waiting for approval
        revision = 2 + round_number
        upload(kb, "policy", paragraphs(f"rev{revision}"))
        candidate = ready_build(document, revision)
        last_event = PublicationEvent.objects.filter(document=document).latest("pk").pk

        # when one admin approves it while another rolls back to the retained build, both
        # having confirmed a page that showed the current live build — two processes at once
        outcomes = admins.race(
            {
                "approve": f"build_approve(build_id={candidate.pk}, actor=None, "
                f"expected_live_build_id={live.pk})",
                "rollback": f"document_rollback(document_id={document.pk}, "
                f"build_id={retained.pk}, actor=None, expected_live_build_id={live.pk})",
            }
        )

        # then exactly one wins; the loser is refused with a clear message and changed nothing
        codes = {name: o.code for name, o in outcomes.items()}
        assert sorted(codes.values()) == [0, 3], outcomes
        winner = next(name for name, code in codes.items() if code == 0)
        loser = "rollback" if winner == "approve" else "approve"
        assert outcomes[loser].line == f"REFUSED: {STALE_VIEW}"
        # one lock order: neither process hit a deadlock or any other lock error
        assert all(o.conflicts == [] for o in outcomes.values()), outcomes
        winning_build = candidate if winner == "approve" else retained
        assert outcomes[winner].line == f"WON: published {winning_build.pk} {live.pk}"
        # and the state is the winner's: pointer, desired revision, exactly one event
        document.refresh_from_db()
        assert Publication.objects.get(document=document).build_id == winning_build.pk
        assert document.desired_revision == winning_build.revision.number
        assert events_of(document, after=last_event) == [(winner, winning_build.pk, live.pk)]
        states = dict(
            Build.objects.filter(pk__in=[candidate.pk, live.pk, retained.pk]).values_list(
                "pk", "state"
            )
        )
        assert states == {
            # a rollback retires the newer candidate that waited for approval
            candidate.pk: "live" if winner == "approve" else "superseded",
            live.pk: "superseded",
            retained.pk: "live" if winner == "rollback" else "superseded",
        }
        retained, live = live, winning_build
        ever_live.add(winning_build.revision.number)
        calls = outcomes.values()
        overlap = min(o.finished for o in calls) - max(o.started for o in calls)
        report.append(
            f"round {round_number}: {winner} won, calls overlapped {overlap * 1000:.1f} ms"
        )

    let_search(searcher)
    searcher.stop()
    searcher.assert_clean()
    assert searcher.seen["policy"] <= ever_live
    print("\nF-X1 " + "; ".join(report))
    assert_verified()


def test_f_x1_a_deadlocked_approve_is_retried_and_publishes_once(
    worker_factory: WorkerFactory,
    searching: SearcherFactory,
    contenders: Callable[[list[str]], Contenders],
    tenant: Tenant,
) -> None:
    worker_factory(pool="solo", **WORKER_ENV)
    admin = contenders(["approve"])
    kb = approval_kb(tenant)
    searcher = searching(kb, ["paragraph", "rev2 paragraph 3"])
    document = upload(kb, "policy", paragraphs("rev1"))
    live = ready_build(document, 1)
    build_approve(build_id=live.pk, actor=None)
    upload(kb, "policy", paragraphs("rev2"))
    candidate = ready_build(document, 2)
    last_event = PublicationEvent.objects.filter(document=document).latest("pk").pk

    # given an approve in its own process, connected and waiting for the barrier
    backend = admin.prepare(
        {
            "approve": f"build_approve(build_id={candidate.pk}, actor=None, "
            f"expected_live_build_id={live.pk})"
        }
    )["approve"]
    # when a foreign session locks the build, lets the approve lock the document and queue
    # behind it, then asks for the document: a lock-order cycle that PostgreSQL breaks by aborting
    # the approve (its deadlock_timeout of 1 s fires long before this session's 30 s)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL deadlock_timeout = '30s'")
        locks.lock_build(candidate.pk)
        admin.go()
        wait_for(
            lambda: _waiting_on_lock(backend),
            relay=False,
            timeout=30,
            what="the approve to wait for the build lock",
        )
        locks.lock_document(document.pk)
    outcome = admin.results(["approve"])["approve"]

    # then the approve lost the deadlock, was retried and published exactly once
    assert outcome.conflicts == ["CONFLICT 40P01 OperationalError"]
    assert (outcome.code, outcome.line) == (0, f"WON: published {candidate.pk} {live.pk}")
    assert live_revision(document) == 2
    assert events_of(document, after=last_event) == [("approve", candidate.pk, live.pk)]
    let_search(searcher)
    searcher.stop()
    searcher.assert_clean()
    assert searcher.seen["policy"] <= {1, 2}
    assert_verified()


def _waiting_on_lock(backend_pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", [backend_pid]
        )
        row = cursor.fetchone()
    return bool(row and row[0])


# --- F-D1: a purge scheduled before a restore must not cut short a later delete's window ---


def test_f_d1_a_purge_scheduled_before_a_restore_spares_a_later_delete(
    worker_factory: WorkerFactory, searching: SearcherFactory, kb: KnowledgeBase, settings: Any
) -> None:
    worker = worker_factory(pool="solo", **WORKER_ENV)
    memo = upload(kb, "memo", paragraphs("delta"))
    converge(lambda: live_revision(memo) == 1, what="memo live")
    searcher = searching(kb, ["paragraph", "delta paragraph 2"])
    memo_chunks = chunk_ids(build_of(memo, 1))
    # given a document deleted, restored, and deleted again, each delete with an hour's window
    settings.DELETE_PURGE_DELAY_SECONDS = 3600
    document_delete(document_id=memo.pk, reason="first")
    document_restore(document_id=memo.pk, reason="oops")
    document_delete(document_id=memo.pk, reason="second")
    first_purge, second_purge = IngestionTask.objects.filter(
        kind=IngestionTask.Kind.DELETE, document=memo
    ).order_by("pk")

    # when the first delete's window ends (clock stand-in) while the second's has time left
    make_due(first_purge)
    wait_for(
        lambda: IngestionTask.objects.filter(
            pk=first_purge.pk, status=IngestionTask.Status.SUCCEEDED
        ).exists(),
        what="the first purge task done",
    )
    searcher.stop()

    # then nothing is purged: the document can still be restored within its current window
    memo.refresh_from_db()
    second_purge.refresh_from_db()
    assert second_purge.status == IngestionTask.Status.QUEUED
    purges = re.findall(r"purged \d+ chunks", worker.log())
    assert memo.purged_at is None, (
        "the purge scheduled by the first delete removed the document although it was deleted "
        f"again afterwards and that delete's window has not ended ({purges})"
    )
    assert chunk_ids(build_of(memo, 1)) == memo_chunks
    document_restore(document_id=memo.pk, reason="restored within the window")
    assert visible(kb) == {"memo": {1}}
    searcher.assert_clean()
    assert_verified()
