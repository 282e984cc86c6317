"""Workers on two hosts; one is cut off from the primary mid-build.

Hosts h1 and h2 are network namespaces with a veth link each to the primary, where this test's
own PostgreSQL and Redis listen and beat runs. Each host runs the Procfile's worker. The build
starts on h1 and is held there at one of three points; h1's link is pulled; its lease expires
and the sweeper requeues the task; h2 claims it and publishes. Then h1's link comes back, and
everything h1 still had in flight (its lease renewal, and the chunk batch, the switch or the
rest of the switch's transaction) reaches the primary and is refused by the lease fence: the
rows are exactly what h2 left, kb_verify finds nothing, and the audit trail names h1's lost
lease.

    write          cut between two committed chunk batches (a slow write stage);
                   h1's next batch is fenced off
    before_switch  cut after every stage succeeded, before the switch (h1 paused there, cut,
                   resumed); h1's switch is fenced off
    in_switch      cut inside the switch's transaction, row locks held (paused, cut, resumed):
                   the sweeper waits for those locks until PostgreSQL ends the idle
                   transaction (idle_in_transaction_session_timeout, docs/SCALING.md); without
                   that setting it waited as long as the link was down
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.multihost.conftest import Process, Site

pytestmark = pytest.mark.integration

CHUNK_WRITE_BATCH = "5"
PARAGRAPHS = "40"
# What h1's run of the task returns once its link is back (Celery logs the return value), and
# the line its worker logs on the way: the fence refused the write (LeaseLost), or the session
# was gone and the fenced attempt to record a retry was refused in silence.
LATE_OUTCOME = {
    "write": ("lease_lost", "lease lost; stopping without writing"),
    "before_switch": ("lease_lost", "lease lost; stopping without writing"),
    # PostgreSQL ended h1's idle transaction: h1 reads either the server's notice of it or,
    # when the notice is lost with the session, the closed connection.
    "in_switch": (
        "retry",
        "task will be retried: (InternalError: terminating connection due to "
        "idle-in-transaction timeout|OperationalError: .*closed the connection)",
    ),
}
# After the link is back: twice the hosts' retransmission cap, so nothing h1 sent is still on
# the wire when the rows are read again.
SETTLE_SECONDS = 2.0
# The write stage's pace on h1: a pause of this many seconds after each committed batch, so
# that the cut (right after the first batch) lands between two batches, outside a transaction,
# even on a loaded machine. h1 is cut off for the rest of its run anyway.
H1_BATCH_DELAY = {"write": "3.0", "before_switch": "0", "in_switch": "0"}


# Every row a worker building the task could write: table -> (WHERE, ORDER BY), with
# %(document)s and %(task)s; each read whole, as JSON.
WRITABLE_ROWS = {
    "kb_document": ("id = %(document)s", "id"),
    "kb_revision": ("document_id = %(document)s", "id"),
    "kb_build": ("document_id = %(document)s", "id"),
    "kb_chunk": ("document_id = %(document)s", "id"),
    "kb_posting": (
        "chunk_id IN (SELECT id FROM kb_chunk WHERE document_id = %(document)s)",
        "chunk_id, term",
    ),
    "kb_lexicalstat": (
        "build_id IN (SELECT id FROM kb_build WHERE document_id = %(document)s)",
        "build_id, term",
    ),
    "kb_publication": ("document_id = %(document)s", "id"),
    "kb_publicationevent": ("document_id = %(document)s", "id"),
    "ingestion_ingestiontask": ("true", "id"),
    "ingestion_stageresult": ("true", "id"),
    "ingestion_outboxevent": ("task_id = %(task)s", "id"),
    "ingestion_auditevent": (
        "(subject_type = 'task' AND subject_id = %(task)s) OR (subject_type = 'document' AND "
        "subject_id = %(document)s) OR (subject_type = 'build' AND subject_id IN "
        "(SELECT id FROM kb_build WHERE document_id = %(document)s))",
        "id",
    ),
    "ingestion_embeddingcache": ("true", "id"),
}


def rows(site: Site, *, document_id: int, task_id: int) -> dict[str, list[dict[str, Any]]]:
    """Every row of WRITABLE_ROWS, to compare before and after."""
    params = {"document": document_id, "task": task_id}
    snapshot = {}
    for table, (where, order) in WRITABLE_ROWS.items():
        ((found,),) = site.query(
            f"SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY {order}), '[]') "  # noqa: S608
            f"FROM {table} x WHERE {where}",
            params,
        )
        snapshot[table] = found
    return snapshot


def task_row(site: Site, task_id: int) -> dict[str, Any]:
    (row,) = site.query(
        "SELECT status, attempt, lease_owner, lease_expires_at < now(), chunks_written, "
        "expected_chunk_count FROM ingestion_ingestiontask t JOIN kb_build b ON b.id = t.build_id "
        "WHERE t.id = %s",
        [task_id],
    )
    keys = ["status", "attempt", "owner", "expired", "chunks_written", "expected"]
    return dict(zip(keys, row, strict=True))


def paused_child(markers: Path, point: str) -> int | None:
    """The pid of the pool child stopped at `point` (its marker is written just before SIGSTOP)."""
    for marker in markers.glob(f"paused_{point}.*"):
        pid = int(marker.suffix[1:])
        if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
            return pid
    return None


def busy_backends(site: Site, address: str) -> int:
    """Sessions from `address` that are running a statement or sit in a transaction."""
    ((n,),) = site.query(
        "SELECT count(*) FROM pg_stat_activity WHERE client_addr = %s AND state <> 'idle'",
        [address],
    )
    return int(n)


def task_outcomes(worker: Process) -> list[str]:
    """What each `run_task` run on this worker returned, in order."""
    return re.findall(r"ingestion\.tasks\.run_task\[[^\]]+\] succeeded in [^:]+: '(\w+)'",
                      worker.log())  # fmt: skip


@pytest.mark.parametrize("cut_at", ["write", "before_switch", "in_switch"])
def test_a_host_cut_off_mid_build_loses_its_lease_and_its_late_writes_change_nothing(
    site: Site, cut_at: str
) -> None:
    h1, h2 = site.hosts["h1"], site.hosts["h2"]
    markers = site.tmp_path / "markers"
    pause = {} if cut_at == "write" else {"CANON_FAULT_PAUSE_AT": cut_at}

    # given beat on the primary and a worker on h1 whose write stage is slow
    site.beat()
    w1 = site.worker(
        h1,
        CANON_CHUNK_WRITE_BATCH=CHUNK_WRITE_BATCH,
        CANON_FAULT_CHUNK_BATCH_DELAY=H1_BATCH_DELAY[cut_at],
        CANON_FAULT_MARKER_DIR=str(markers),
        **pause,
    )
    ids = site.driver("upload", "--paragraphs", PARAGRAPHS)
    task_id, build_id, document_id = ids["task"], ids["build"], ids["document"]

    # when h1 claims the build, and a worker on h2 starts meanwhile
    claimed = site.wait(
        lambda: (row := task_row(site, task_id))["owner"].startswith(f"{h1.name}:") and row,
        what="h1 to claim the build",
    )
    h1_owner = claimed["owner"]
    assert (claimed["status"], claimed["attempt"]) == ("running", 1)
    w2 = site.worker(h2, CANON_CHUNK_WRITE_BATCH=CHUNK_WRITE_BATCH)

    # and h1's link is cut at the chosen point
    if cut_at == "write":
        held = site.wait(
            lambda: (
                (row := task_row(site, task_id))["chunks_written"] >= int(CHUNK_WRITE_BATCH) and row
            ),
            what="h1's first chunk batch",
        )
        h1.cut()
        site.note("h1 cut off")
        assert held["chunks_written"] < held["expected"], "h1 wrote every batch before the cut"
    else:
        child = site.wait(lambda: paused_child(markers, cut_at), what=f"h1 to pause {cut_at}")
        h1.cut()
        site.note("h1 cut off")
        os.kill(child, signal.SIGCONT)  # h1 goes on, into a link that carries nothing
    assert h1.is_cut()
    w2.wait_ready()

    # then h1's lease expires and the sweeper requeues the task, naming h1's lease
    expiry = site.wait(
        lambda: site.query(
            "SELECT action, attempts, details->>'lease_owner' FROM ingestion_auditevent "
            "WHERE kind = 'lease_expired' AND subject_type = 'task' AND subject_id = %s",
            [task_id],
        ),
        what="the sweeper to requeue h1's expired lease",
    )
    assert expiry == [("requeued", 1, h1_owner)]

    # and h2 claims the task (attempt 2) and publishes the build
    site.wait(
        lambda: task_row(site, task_id)["status"] == "succeeded", what="h2 to finish the build"
    )
    done = task_row(site, task_id)
    assert done["attempt"] == 2 and done["owner"].startswith(f"{h2.name}:"), done
    assert h1.is_cut() and w1.alive, "h1 must still be cut off, and running, when h2 publishes"
    assert task_outcomes(w1) == [], "h1 must not have finished its run while cut off"
    before = rows(site, document_id=document_id, task_id=task_id)

    # when h1's link comes back, everything it had in flight reaches the primary
    h1.restore()
    restored = time.monotonic()
    site.note("h1's link restored")
    outcomes = site.wait(lambda: task_outcomes(w1), what="h1's run of the task to end", timeout=60)
    site.wait(
        lambda: (
            time.monotonic() - restored > SETTLE_SECONDS and busy_backends(site, h1.address) == 0
        ),
        what="h1's sessions to go quiet",
    )
    after = rows(site, document_id=document_id, task_id=task_id)

    # then the fence refused all of it: h1 changed no row h2 left
    outcome, line = LATE_OUTCOME[cut_at]
    assert outcomes == [outcome], w1.log()[-3000:]
    assert re.search(line, w1.log()), w1.log()[-3000:]
    assert after == before

    # and the document has exactly one live build, h2's, with only its chunks
    publications = [(p["build_id"], p["index_version_id"]) for p in after["kb_publication"]]
    assert publications == [(build_id, ids["index_version"])]
    (build,) = after["kb_build"]
    assert (build["id"], build["state"]) == (build_id, "live")
    chunks = after["kb_chunk"]
    assert build["expected_chunk_count"] and len(chunks) == build["expected_chunk_count"]
    assert {chunk["build_id"] for chunk in chunks} == {build_id}
    assert [event["action"] for event in after["kb_publicationevent"]] == ["publish"]
    (task,) = after["ingestion_ingestiontask"]
    assert (task["status"], task["attempt"]) == ("succeeded", 2)
    assert task["lease_owner"].startswith(f"{h2.name}:")

    # and kb_verify's invariants hold
    verify = site.manage("kb_verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
