"""Logging filters of Canon's console handler (config.settings.LOGGING)."""

from __future__ import annotations

import logging

# The periodic jobs that run every few seconds: the relay every second, the sweeper every 15 s.
ROUTINE = (
    "ingestion.tasks.relay_outbox",
    "ingestion.tasks.sweep_leases",
    "outbox-relay",
    "lease-sweeper",
)


class RoutineTasksFilter(logging.Filter):
    """Drops the INFO lines Celery writes for each routine run of the relay and the sweeper
    (sent, received, succeeded: three lines a second that drown everything else). Their warnings
    and errors pass, as does everything about builds. LOG_ROUTINE_TASKS=1 keeps them all."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO or not record.name.startswith("celery"):
            return True
        message = record.getMessage()
        return not any(name in message for name in ROUTINE)
