"""Search on a real streaming replica: a hot standby of the test server (devtools/standby.py), the
API's searches routed to it (`SEARCH_DATABASE = "replica"`), while a real worker builds and
publishes on the primary and a driver deletes, restores and changes access groups there.

Every result set the replica gives is judged by the soak's checker (tests/soak/checker.py) by
the visibility rule: one complete published version per document, nothing surely deleted,
nothing forbidden. "Surely" is measured on the replica: a delete or a restriction counts from
the moment the standby has replayed the primary's WAL past its commit (searches sent after that
must not see it); before that the replica legitimately serves the older state, for its lag.
"""

from __future__ import annotations

import math
import random
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import DEFAULT_DB_ALIAS, InternalError, connections, transaction
from django.test.utils import CaptureQueriesContext

from devtools.standby import Standby, primary_lsn, replication_lag
from ingestion.relay import outbox_relay_batch
from kb.models import Document, KnowledgeBase, Publication, PublicationEvent, Tenant
from kb.services.documents import document_delete, document_restore, document_update
from retrieval.principals import Principal, api_key_create
from retrieval.routing import REPLICA
from retrieval.search.engine import search
from retrieval.search.hits import SearchFilters
from tests.conftest import database_url, wait_for
from tests.replica.conftest import DATABASES, replica_alias
from tests.retrieval.factories import api, publish, upload
from tests.soak.checker import Checker, Hit, Ledger, ResultSet
from tests.soak.searchers import SNAPSHOT_CHECK, ApiSearcher, publication_facts
from tests.soak.world import MODES, WORDS, Loop, document_text
from work.models import IngestionTask

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True, databases=DATABASES),
]

CHURN_SECONDS = 20.0  # then on until 5 revisions and a delete were made (60 s more at most)
ACTIVE = (
    IngestionTask.Status.QUEUED,
    IngestionTask.Status.RUNNING,
    IngestionTask.Status.RETRY_WAIT,
)


@pytest.fixture(scope="module", autouse=True)
def _alias(standby: Standby, django_db_blocker: Any) -> Iterator[str]:
    name = connections.settings[DEFAULT_DB_ALIAS]["NAME"]
    with (
        django_db_blocker.unblock(),
        replica_alias(host="127.0.0.1", port=standby.port, name=name) as alias,
    ):
        yield alias


@pytest.fixture
def on_replica(settings: Any) -> str:
    """The API's searches read the standby (what CANON_SEARCH_REPLICA_URL configures)."""
    settings.SEARCH_DATABASE = REPLICA
    settings.CANON_API_RATE = "1000000/min"
    return REPLICA


class Replay:
    """When the standby has replayed what the primary committed so far."""

    def __init__(self, standby: Standby) -> None:
        self.primary = database_url()
        self.replica = standby.url(connections.settings[DEFAULT_DB_ALIAS]["NAME"])

    def caught_up(self, timeout: float = 30.0) -> float:
        """Wait until every commit that returned before this call is replayed on the standby;
        return the time it was seen replayed."""
        lsn = primary_lsn(self.primary)
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.replica, autocommit=True) as conn:
            while True:
                row = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [lsn])
                if (fetched := row.fetchone()) and fetched[0]:
                    return time.time()
                if time.monotonic() > deadline:
                    raise AssertionError(f"the standby did not replay {lsn} in {timeout}s")
                time.sleep(0.002)


class Spans:
    """Per document, the periods in which the primary surely forbids it (to every key here)."""

    def __init__(self) -> None:
        self.spans: dict[str, list[list[float]]] = {}
        self._lock = threading.Lock()

    def start(self, key: str, at: float) -> None:
        with self._lock:
            self.spans.setdefault(key, []).append([at, math.inf])

    def end(self, key: str, at: float) -> None:
        with self._lock:
            if self.spans.get(key) and self.spans[key][-1][1] == math.inf:
                self.spans[key][-1][1] = at

    def surely(self, key: str, start: float, end: float) -> bool:
        with self._lock:
            return any(lo <= start and end <= hi for lo, hi in self.spans.get(key, ()))


class ClosingLoop(Loop):
    """A Loop that closes its thread's connections to both databases when it ends."""

    def run(self) -> None:
        try:
            super().run()
        finally:
            connections.close_all()


class ReplicaApiSearcher(ClosingLoop, ApiSearcher):
    """The soak's API searcher; with `on_replica` its searches read the standby."""


class SnapshotOnReplica(ClosingLoop):
    """Searches the standby inside its own repeatable-read snapshot there, and checks in that
    snapshot that each hit's build is the live, complete build of a document not deleted (the
    soak's snapshot check, read on the replica); also notes that the connection is the
    standby's."""

    def __init__(self, kb: KnowledgeBase, checker: Checker, rng: random.Random) -> None:
        super().__init__("replica-snapshot")
        self.kb = kb
        self.checker = checker
        self.rng = rng
        self.principal = Principal(
            tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
        )
        self.servers: set[tuple[bool, int]] = set()
        self.sets = 0

    def step(self) -> None:
        sent = time.time()
        with transaction.atomic(using=REPLICA), connections[REPLICA].cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cursor.execute("SELECT pg_is_in_recovery(), inet_server_port()")
            row = cursor.fetchone()
            assert row is not None
            self.servers.add((bool(row[0]), int(row[1])))
            result = search(
                principal=self.principal,
                kb=self.kb,
                query=" ".join(self.rng.sample(WORDS, self.rng.randint(1, 3))),
                top_k=50,
                mode=self.rng.choice(MODES),
                using=REPLICA,
            )
            hits = tuple(Hit(h.document_key, h.build_id, h.revision) for h in result.hits)
            build_ids = sorted({h.build_id for h in hits})
            cursor.execute(SNAPSHOT_CHECK, [build_ids])
            rows = cursor.fetchall()
        received = time.time()
        published, failed = publication_facts(set(build_ids))
        self.checker.check(
            ResultSet(self.name, None, sent, received, hits), published=published, failed=failed
        )
        extra = []
        for build_id, state, expected, deleted, live, chunks in rows:
            if not live or state != "live":
                extra.append(f"replica snapshot: build {build_id} ({state}) is not live")
            if chunks != expected:
                extra.append(f"replica snapshot: build {build_id} has {chunks}/{expected} chunks")
            if deleted:
                extra.append(f"replica snapshot: build {build_id}'s document is deleted")
        if len(rows) != len(build_ids):
            extra.append(f"replica snapshot: builds {build_ids} not all found")
        self.checker.record(extra)
        self.sets += 1
        self.halt.wait(0.02)


class Driver(Loop):
    """On the primary: new revisions (the worker builds and publishes them), deletes,
    restores, and the `toggle` document's access groups flipped between none and `secret`
    (which no key holds)."""

    def __init__(
        self, kb: KnowledgeBase, ledger: Ledger, forbidden: Spans, replay: Replay, seed: int
    ) -> None:
        super().__init__("driver")
        self.kb = kb
        self.ledger = ledger
        self.forbidden = forbidden
        self.replay = replay
        self.rng = random.Random(seed)
        self.ops: dict[str, int] = {}
        self.until = time.monotonic() + CHURN_SECONDS

    def step(self) -> None:
        enough = self.ops.get("revise", 0) >= 5 and self.ops.get("delete", 0) >= 1
        if time.monotonic() > self.until and (enough or time.monotonic() > self.until + 60):
            self.halt.set()
            return
        documents = list(Document.objects.filter(kb=self.kb).order_by("key"))
        roll = self.rng.random()
        if roll < 0.6:
            document = self.rng.choice([d for d in documents if d.deleted_at is None])
            _, body = document_text(self.rng, document.key, (document.desired_revision or 0) + 1)
            upload(self.kb, document.key, body.decode())
            self._done("revise")
        elif roll < 0.75:
            candidates = [d for d in documents if d.deleted_at is None and d.key != "toggle"]
            if len(candidates) > 2:
                document = self.rng.choice(candidates)
                document_delete(document_id=document.pk, reason="replica test")
                self.ledger.delete_returned(document.key, self.replay.caught_up())
                self._done("delete")
        elif roll < 0.85:
            deleted = [d for d in documents if d.deleted_at is not None]
            if deleted:
                document = self.rng.choice(deleted)
                self.ledger.restore_started(document.key, time.time())
                document_restore(document_id=document.pk, reason="replica test")
                self._done("restore")
        else:
            toggle = next(d for d in documents if d.key == "toggle")
            if toggle.access_groups:
                self.forbidden.end("toggle", time.time())
                document_update(document=toggle, title=toggle.title, access_groups=[])
                self._done("groups opened")
            else:
                document_update(document=toggle, title=toggle.title, access_groups=["secret"])
                self.forbidden.start("toggle", self.replay.caught_up())
                self._done("groups closed")
        outbox_relay_batch()
        self.halt.wait(0.25)

    def _done(self, op: str) -> None:
        self.ops[op] = self.ops.get(op, 0) + 1


class Probe(ClosingLoop):
    """For every publish on the primary (its PublicationEvent), how long until a search on the
    replica returns that revision of the document (or a later one)."""

    def __init__(self, kb: KnowledgeBase) -> None:
        super().__init__("probe")
        self.kb = kb
        self.principal = Principal(
            tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
        )
        self.after_id = (
            PublicationEvent.objects.order_by("-pk").values_list("pk", flat=True).first()
        )
        self.pending: dict[int, tuple[str, int, float]] = {}
        self.delays: list[float] = []

    def step(self) -> None:
        self.sweep()
        self.halt.wait(0.01)

    def sweep(self) -> None:
        events = PublicationEvent.objects.filter(
            kb=self.kb, action="publish", pk__gt=self.after_id or 0
        ).values_list("pk", "document__key", "revision_number", "created_at")
        for pk, key, revision, created_at in events:
            self.pending[pk] = (key, revision or 0, created_at.timestamp())
            self.after_id = max(self.after_id or 0, pk)
        for pk, (key, revision, at) in list(self.pending.items()):
            if revision <= max(self.revisions_on_replica(key), default=0):
                self.delays.append(time.time() - at)
                del self.pending[pk]

    def revisions_on_replica(self, key: str) -> set[int]:
        result = search(
            principal=self.principal,
            kb=self.kb,
            query="probe",
            top_k=50,
            mode="vector",
            filters=SearchFilters(document_keys=(key,)),
            using=REPLICA,
        )
        return {hit.revision for hit in result.hits}


def drained(kb: KnowledgeBase, *, timeout: float) -> None:
    """Wait until no build task of `kb` is queued, running or waiting to retry (a deleted
    document's purge waits for its retention window: not a build)."""
    deadline = time.monotonic() + timeout
    builds = IngestionTask.objects.filter(kb=kb, status__in=ACTIVE, build__isnull=False)
    while builds.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"builds still to do after {timeout}s: {list(builds.values())}")
        outbox_relay_batch()
        time.sleep(0.2)


def live_revisions_on_primary(kb: KnowledgeBase) -> dict[str, int]:
    kb.refresh_from_db()
    return dict(
        Publication.objects.filter(
            kb=kb, index_version_id=kb.active_index_version_id, document__deleted_at__isnull=True
        ).values_list("document__key", "build__revision__number")
    )


def percentiles(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return (
        f"n={len(ordered)} p50={statistics.median(ordered) * 1000:.1f}ms "
        f"p95={p95 * 1000:.1f}ms max={ordered[-1] * 1000:.1f}ms"
    )


def test_search_reads_the_standby_which_refuses_writes(
    kb: KnowledgeBase, api_key: str, on_replica: str, standby: Standby
) -> None:
    publish(kb, "travel", "Trains are reimbursed in second class.")
    Replay(standby).caught_up()

    with CaptureQueriesContext(connections[REPLICA]) as replica:
        response = api(api_key).post(
            "/api/v1/search",
            {"kb": "handbook", "query": "trains", "mode": "hybrid"},
            content_type="application/json",
        )
    with connections[REPLICA].cursor() as cursor:  # the connection the search used
        cursor.execute("SELECT pg_is_in_recovery(), inet_server_port()")
        server = cursor.fetchone()

    assert response.status_code == 200, response.content
    assert [h["document_key"] for h in response.json()["hits"]] == ["travel"]
    assert any("kb_chunk" in q["sql"] for q in replica.captured_queries)
    assert server == (True, standby.port)
    with pytest.raises(InternalError, match="read-only transaction"):
        Tenant.objects.using(REPLICA).create(name="Nope", slug="nope")


def test_churn_on_the_primary_never_shows_the_replicas_searchers_a_broken_version(
    kb: KnowledgeBase,
    tenant: Tenant,
    on_replica: str,
    standby: Standby,
    worker_factory: Any,
) -> None:
    worker_factory()
    ledger, forbidden, replay = Ledger(), Spans(), Replay(standby)
    public_docs, staff_docs = ["d0", "d1", "d2"], ["s0", "s1"]
    rng = random.Random(15)
    for key in [*public_docs, *staff_docs, "toggle"]:
        groups = ["staff"] if key in staff_docs else []
        ledger.created(key, groups)  # `toggle`: its changes are judged by `forbidden`
        _, body = document_text(rng, key, 1)
        upload(kb, key, body.decode(), groups=tuple(groups))
    wait_for(
        lambda: len(live_revisions_on_primary(kb)) == 6,
        timeout=120,
        what="the first revisions to go live",
    )
    replay.caught_up()
    _, public_key = api_key_create(tenant=tenant, name="public")
    _, staff_key = api_key_create(tenant=tenant, name="staff", access_groups=["staff"])
    checker = Checker(ledger)
    api_searchers = [
        ReplicaApiSearcher(
            "public", public_key, frozenset(), ["handbook"], checker, random.Random(1)
        ),
        ReplicaApiSearcher(
            "staff", staff_key, frozenset({"staff"}), ["handbook"], checker, random.Random(2)
        ),
    ]
    snapshot = SnapshotOnReplica(kb, checker, random.Random(3))
    searchers: list[Loop] = [*api_searchers, snapshot]
    probe = Probe(kb)
    driver = Driver(kb, ledger, forbidden, replay, seed=4)
    lag: list[float] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.2):
            value = replication_lag(replay.primary, standby.application_name)["replay_lag"]
            if value is not None:
                lag.append(value)

    sampler = threading.Thread(target=sample, daemon=True)
    forbidden_seen: list[str] = []
    original_check = checker.check

    def check(result: ResultSet, **facts: Any) -> list[str]:
        for hit in result.hits if result.groups is not None else ():
            if forbidden.surely(hit.document_key, result.sent, result.received):
                forbidden_seen.append(
                    f"{result.searcher} at {result.sent:.3f}: {hit.document_key} is behind "
                    "'secret' on the replica already"
                )
        return original_check(result, **facts)

    checker.check = check  # type: ignore[method-assign]
    threads: list[Loop] = [*searchers, probe, driver]
    for thread in threads:
        thread.start()
    sampler.start()
    try:
        driver.join(CHURN_SECONDS + 180)
        # Convergence: the worker drains, the standby replays it all, the replica then serves
        # exactly the primary's live revisions.
        drained(kb, timeout=300)
        replay.caught_up()
        time.sleep(0.5)  # one more round of every searcher and of the probe on the final state
    finally:
        for thread in threads:
            thread.stop()
        sampling.set()
        sampler.join(5)
    probe.sweep()
    on_replica_now = {
        key: max(probe.revisions_on_replica(key), default=None)
        for key in [*public_docs, *staff_docs, "toggle"]
    }
    connections[REPLICA].close()
    primary_now = live_revisions_on_primary(kb)
    deleted = set(
        Document.objects.filter(kb=kb, deleted_at__isnull=False).values_list("key", flat=True)
    )

    print(
        f"\nreplica churn: ops {driver.ops}; result sets {checker.checked} "
        f"({checker.hits} hits); replay_lag {percentiles(lag)}; "
        f"publish-to-visible {percentiles(probe.delays)}"
    )
    assert [t.crashed for t in threads if t.crashed] == []
    assert checker.violations == []
    assert forbidden_seen == []
    assert driver.ops.get("revise", 0) >= 5 and driver.ops.get("delete", 0) >= 1, driver.ops
    assert checker.checked >= 20 and checker.hits > 0
    assert [s.answers.counts for s in api_searchers if set(s.answers.counts) != {"200"}] == []
    assert snapshot.sets > 0 and snapshot.servers == {(True, standby.port)}
    # Every publish became visible on the replica, unless its document was deleted since.
    unseen = {pk: v for pk, v in probe.pending.items() if v[0] not in deleted}
    assert unseen == {}
    assert probe.delays  # (a revision superseded before its build ran is never published)
    assert on_replica_now == {key: primary_now.get(key) for key in on_replica_now}
