"""Claiming tasks and holding them with a lease.

A worker owns a task while `lease_owner` is its id and `lease_expires_at` (database clock) is in
the future. Every write that matters runs inside `fenced(lease)`, which re-checks ownership under
a row lock in the same transaction, so a worker that lost its lease (paused, partitioned, slow)
changes nothing once it resumes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now

from work import faults
from work.models import IngestionTask

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """The task is no longer ours: stop writing at once."""


@dataclass
class Lease:
    task_id: int
    owner: str
    ttl: float
    attempt: int
    lost: threading.Event = field(default_factory=threading.Event)


def task_claim(*, task_id: int, owner: str, ttl: float | None = None) -> Lease | None:
    """Claim a task with one conditional UPDATE; None when it is not claimable.

    Claimable: queued or retry_wait and available, or running with an expired lease and attempts
    left (past the cap the sweeper dead-letters it). Uses the
    database clock. Runs in its own transaction (autocommit); idempotent for duplicate messages:
    a second claim of a task held under a valid lease updates zero rows.
    """
    ttl = settings.LEASE_TTL_SECONDS if ttl is None else ttl
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE ingestion_ingestiontask
               SET status = 'running', lease_owner = %s,
                   lease_expires_at = now() + %s * interval '1 second',
                   attempt = attempt + 1, updated_at = now()
             WHERE id = %s
               AND ((status IN ('queued', 'retry_wait')
                     AND (available_at IS NULL OR available_at <= now()))
                    OR (status = 'running' AND lease_expires_at < now()
                        AND attempt < max_attempts))
            RETURNING attempt
            """,
            [owner, ttl, task_id],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return Lease(task_id=task_id, owner=owner, ttl=ttl, attempt=row[0])


def lease_renew(lease: Lease) -> bool:
    """Extend the lease; False (and `lease.lost` set) when zero rows matched."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE ingestion_ingestiontask
               SET lease_expires_at = now() + %s * interval '1 second'
             WHERE id = %s AND status = 'running' AND lease_owner = %s AND lease_expires_at > now()
            """,
            [lease.ttl, lease.task_id, lease.owner],
        )
        renewed = cursor.rowcount == 1
    if not renewed:
        lease.lost.set()
    return renewed


def lease_check(lease: Lease) -> None:
    """Raise LeaseLost unless the lease is still held. Must run inside a transaction; takes a
    share lock on the task row so the sweeper cannot requeue it before this transaction ends."""
    if lease.lost.is_set():
        raise LeaseLost(f"lease on task {lease.task_id} was lost")
    held = (
        IngestionTask.objects.select_for_update()
        .filter(
            pk=lease.task_id, status="running", lease_owner=lease.owner, lease_expires_at__gt=Now()
        )
        .exists()
    )
    if not held:
        lease.lost.set()
        raise LeaseLost(f"lease on task {lease.task_id} is no longer held by {lease.owner}")


@contextlib.contextmanager
def fenced(lease: Lease) -> Iterator[None]:
    """A transaction that commits only while `lease` is held (see `lease_check`)."""
    with transaction.atomic():
        lease_check(lease)
        yield


class Heartbeat:
    """Renews a lease every ttl/4 on its own thread and database connection."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"lease-{lease.task_id}", daemon=True
        )

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.lease.ttl / 4):
                if faults.heartbeat_dropped():
                    continue
                try:
                    if not lease_renew(self.lease):
                        if not self._stop.is_set():  # after success the row is simply closed
                            logger.warning("lease lost", extra={"task_id": self.lease.task_id})
                        return
                except Exception:
                    # A failed renewal is not yet a lost lease; the next beat tries again, on a
                    # new connection: Django never replaces a broken one by itself.
                    logger.exception("lease renewal failed", extra={"task_id": self.lease.task_id})
                    connection.close()
        finally:
            connection.close()

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
