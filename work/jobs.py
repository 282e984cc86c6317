"""When each periodic job last ran, for the consistency dashboard. Kept in the shared cache:
losing it loses no fact, and a dashboard detail must never fail a job."""

from __future__ import annotations

from datetime import datetime

from django.core.cache import cache
from django.utils import timezone
from django.utils.dateparse import parse_datetime

# The periodic jobs the dashboard lists, by the name each passes to `job_ran`.
JOBS = ("relay", "sweeper", "reconciler", "gc", "idempotency", "sources", "evaluation")


def _key(name: str) -> str:
    return f"canon:last-run:{name}"


def job_ran(name: str) -> None:
    """Remember that the job `name` ran now."""
    try:
        cache.set(_key(name), timezone.now().isoformat(), timeout=None)
    except Exception:  # the cache is Redis; a dashboard detail must never fail a job
        return


def jobs_last_run() -> dict[str, datetime | None]:
    """Each job's last run, None when unknown. Raises what the cache raises."""
    runs = cache.get_many([_key(job) for job in JOBS])
    return {job: _parsed(runs.get(_key(job))) for job in JOBS}


def _parsed(value: object) -> datetime | None:
    try:
        return parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        return None
