"""The console drops Celery's INFO lines about the relay's and sweeper's routine runs, and only
those."""

from __future__ import annotations

import logging

from config.logfilters import RoutineTasksFilter


def record(name: str, level: int, msg: str, args: object = None) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)  # type: ignore[arg-type]


def test_routine_runs_are_dropped_and_everything_else_kept() -> None:
    keep = RoutineTasksFilter().filter
    succeeded = "Task %(name)s[%(id)s] succeeded in %(runtime)ss: %(return_value)s"
    relay = {"name": "ingestion.tasks.relay_outbox", "id": "x", "runtime": 0.01, "return_value": 0}
    build = {**relay, "name": "ingestion.tasks.run_task"}

    assert not keep(record("celery.app.trace", logging.INFO, succeeded, relay))
    assert not keep(
        record("celery.beat", logging.INFO, "Scheduler: Sending due task outbox-relay (x)")
    )
    assert keep(record("celery.app.trace", logging.INFO, succeeded, build))
    assert keep(record("celery.app.trace", logging.ERROR, succeeded, relay))
    assert keep(record("ingestion.tasks", logging.INFO, "relay_outbox sent 3"))
