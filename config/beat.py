"""Beat's scheduler: django-celery-beat's DatabaseScheduler, made to keep each job's clock in its
row across restarts and to share the schedule safely with a second beat.

The stock scheduler keeps `last_run_at` in memory and writes it back every three minutes
(`beat_sync_every`), and at each start `update_or_create` re-saves every row of
`app.conf.beat_schedule`, which moves `date_changed` to now. A row whose `last_run_at` was
never written (a beat that never lived three minutes) is then due one interval after the start,
and one whose value was written is stale by up to three minutes. A beat restarting every 16 s
never swept. Here:

- **A send is claimed in the row first** (`ClaimedEntry.claim`): one conditional UPDATE on
  `total_run_count` records `last_run_at` and counts the run. A restarted beat reads the real
  last run, so a job is due one interval after it last ran, and at once if that is past.
- **A second beat is harmless**: its claim of a run the first already recorded updates zero rows;
  it reloads the row and waits for the next one. So each job is sent once per interval whichever
  beat is alive, and a beat that stops (killed, SIGSTOPped, partitioned) leaves no lock behind:
  the other goes on sending. The jobs are single-flight themselves as well (the sweeper,
  reconciler and garbage collector take advisory locks; the relay claims events with SKIP LOCKED).
- **Unchanged definitions are not re-saved**, so a start neither touches a row nor tells the
  other beats that the schedule changed. A job that has never run is due at once.

The price of claiming before sending: a beat that dies between the claim and the send (a few
milliseconds) loses that one run; the job runs one interval later.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from celery import schedules
from django.db import DatabaseError, InterfaceError, close_old_connections
from django.db.models import F
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler, ModelEntry

logger = logging.getLogger(__name__)

# How long to wait before trying again when the claim could not reach the database.
CLAIM_RETRY_SECONDS = 5.0


class ClaimedEntry(ModelEntry):
    """A periodic task row whose runs are recorded in the row as they are sent."""

    def __init__(self, model: PeriodicTask, app: Any = None) -> None:
        never_ran = model.last_run_at is None
        super().__init__(model, app=app)
        self.claimed_at: datetime.datetime | None = None
        if never_ran and model.start_time is None and isinstance(self.schedule, schedules.schedule):
            # Never ran: overdue, not due one interval after this start (the stock default).
            model.last_run_at = self.last_run_at = self._default_now() - datetime.timedelta(
                seconds=self.schedule.seconds
            )

    def claim(self) -> bool:
        """Record a run of this job now, unless a run was recorded since this entry read the row
        (another beat sent it): then reload the row's last run and count, and return False.

        One conditional UPDATE on the run count (autocommit); no signal, so other beats do not
        re-read the whole schedule for it.
        """
        now = self._default_now()
        claimed = PeriodicTask.objects.filter(
            pk=self.model.pk, enabled=True, total_run_count=self.model.total_run_count
        ).update(last_run_at=now, total_run_count=F("total_run_count") + 1)
        if claimed:
            self.claimed_at = now
            return True
        row = (
            PeriodicTask.objects.filter(pk=self.model.pk)
            .values("enabled", "last_run_at", "total_run_count")
            .first()
        )
        if row is None or not row["enabled"]:
            self.model.enabled = False  # deleted or disabled: the next full read drops it
            return False
        self.model.total_run_count = self.total_run_count = row["total_run_count"]
        if row["last_run_at"] is not None:
            self.model.last_run_at = self.last_run_at = row["last_run_at"]
        return False

    def __next__(self) -> ClaimedEntry:
        self.model.last_run_at = self.claimed_at or self._default_now()
        self.model.total_run_count += 1
        self.model.no_changes = True
        return self.__class__(self.model)

    @classmethod
    def to_model_schedule(cls, schedule: Any) -> tuple[Any, str]:
        """The stock method, without saving a schedule row that already exists (saving one tells
        every beat that the schedule changed)."""
        schedule = schedules.maybe_schedule(schedule)
        for schedule_type, model_type, model_field in cls.model_schedules:
            if isinstance(schedule, schedule_type):
                model_schedule = model_type.from_schedule(schedule)
                if model_schedule.pk is None:
                    model_schedule.save()
                return model_schedule, model_field
        raise ValueError(f"Cannot convert schedule type {schedule!r} to model")

    @classmethod
    def from_entry(cls, name: str, app: Any = None, **entry: Any) -> ClaimedEntry:
        """The row of one declared job: created if missing, saved only if its definition changed
        (then with `no_changes` off, so running beats re-read it). Never touches its last run."""
        fields = cls._unpack_fields(**entry)
        row, created = PeriodicTask.objects.get_or_create(name=name, defaults=fields)
        if not created:
            changed = {key: value for key, value in fields.items() if getattr(row, key) != value}
            if changed:
                for key, value in changed.items():
                    setattr(row, key, value)
                row.no_changes = False
                row.save()
        return cls(row, app=app)


class Scheduler(DatabaseScheduler):
    """`celery beat --scheduler config.beat:Scheduler` (the CELERY_BEAT_SCHEDULER setting)."""

    Entry = ClaimedEntry

    def is_due(self, entry: ClaimedEntry) -> tuple[bool, float]:
        """Due by this beat's clock and claimed in the row; otherwise when to look again."""
        for _ in range(3):
            due, next_check = entry.is_due()
            if not due:
                return due, next_check
            try:
                if entry.claim():
                    return due, next_check
            except (DatabaseError, InterfaceError):
                logger.warning("could not claim %s; trying again", entry.name, exc_info=True)
                close_old_connections()
                return False, CLAIM_RETRY_SECONDS
        return False, CLAIM_RETRY_SECONDS

    def reserve(self, entry: ClaimedEntry) -> ClaimedEntry:
        # The claim wrote the run to the row already: nothing is left for sync() to save.
        return next(entry)
