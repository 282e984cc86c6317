"""Units of work and their records: tasks claimed with leases, the outbox events that announce
them, and the audit trail of repairs and admin actions. PostgreSQL is the source of truth; Redis
only carries messages.

The models keep the app label `ingestion` (tables `ingestion_*`, migrations in
`ingestion/migrations`, permissions `ingestion.*`); Django imports this module because `work` is
an installed app.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy


class IngestionTask(models.Model):
    """One unit of work, claimed with a lease (see `work.leases`)."""

    class Kind(models.TextChoices):
        BUILD = "build", gettext_lazy("Build")
        DELETE = "delete", gettext_lazy("Delete")
        GC = "gc", gettext_lazy("Gc")
        SYNC = "sync", gettext_lazy("Sync")  # a source's sync run (sources.sync)
        EVALUATION = (
            "evaluation",
            gettext_lazy("Evaluation"),
        )  # a question set asked of an index version (evaluation.run)
        # the learned fusion refitted on a question set (evaluation.services.calibration)
        CALIBRATION = "calibration", gettext_lazy("Calibration")

    class Status(models.TextChoices):
        QUEUED = "queued", gettext_lazy("Queued")
        RUNNING = "running", gettext_lazy("Running")
        RETRY_WAIT = "retry_wait", gettext_lazy("Retry Wait")
        SUCCEEDED = "succeeded", gettext_lazy("Succeeded")
        FAILED = "failed", gettext_lazy("Failed")
        DEAD = "dead", gettext_lazy("Dead")

    # A task still to run or running; the others are closed for good.
    OPEN_STATUSES = (Status.QUEUED, Status.RUNNING, Status.RETRY_WAIT)

    kind = models.CharField(max_length=16, choices=Kind.choices, verbose_name=gettext_lazy("kind"))
    kb = models.ForeignKey(
        "kb.KnowledgeBase",
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.PROTECT,
        related_name="+",
    )
    document = models.ForeignKey(
        "kb.Document",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="tasks",
        verbose_name=gettext_lazy("document"),
    )
    build = models.ForeignKey(
        "kb.Build",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="tasks",
        verbose_name=gettext_lazy("build"),
    )
    status = models.CharField(
        max_length=16,
        choices=Status.choices,
        default=Status.QUEUED,
        verbose_name=gettext_lazy("status"),
    )
    attempt = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("attempt"))
    max_attempts = models.PositiveIntegerField(default=5, verbose_name=gettext_lazy("max attempts"))
    lease_owner = models.CharField(
        max_length=200, blank=True, verbose_name=gettext_lazy("lease owner")
    )
    lease_expires_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("lease expires at")
    )
    available_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("available at")
    )
    # Which kind of error ended or delayed the last attempt ("unparseable", a class name, …).
    last_error_code = models.CharField(
        max_length=64, blank=True, verbose_name=gettext_lazy("last error code")
    )
    # Its words in English (the logs' and the machinery's); and, when the error gave a declared
    # reason (`textkit.reasons`), that reason's code and values, which the admin words in the
    # person's language (`kb.failures.task_error_words`). "" and {} for other errors and rows
    # from before reasons were kept.
    last_error = models.TextField(blank=True, verbose_name=gettext_lazy("last error"))
    last_error_reason = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_default="",
        verbose_name=gettext_lazy("last error reason"),
    )
    last_error_params = models.JSONField(
        blank=True, default=dict, db_default={}, verbose_name=gettext_lazy("last error values")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=gettext_lazy("updated at"))
    finished_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("finished at")
    )

    class Meta:
        # Kept in the ingestion app (its tables, migrations and permissions) from before this
        # floor had its own package; `work` is an app without models of its own label.
        verbose_name = gettext_lazy("ingestion task")
        verbose_name_plural = gettext_lazy("ingestion tasks")
        app_label = "ingestion"
        indexes = [
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status="running"),
                name="task_running_lease",
            ),
            models.Index(fields=["status", "available_at"], name="task_status_available"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} task {self.pk} ({self.status})"


class OutboxEvent(models.Model):
    """An intent to deliver, written in the same transaction as the fact it announces."""

    class Kind(models.TextChoices):
        RUN_TASK = "run_task", gettext_lazy("Run Task")

    kind = models.CharField(
        max_length=32,
        choices=Kind.choices,
        default=Kind.RUN_TASK,
        verbose_name=gettext_lazy("kind"),
    )
    task = models.ForeignKey(
        IngestionTask,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="events",
        verbose_name=gettext_lazy("task"),
    )
    payload = models.JSONField(default=dict, verbose_name=gettext_lazy("payload"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))
    available_at = models.DateTimeField(verbose_name=gettext_lazy("available at"))
    published_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("published at")
    )
    attempts = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("attempts"))
    last_error = models.TextField(blank=True, verbose_name=gettext_lazy("last error"))
    dead_at = models.DateTimeField(null=True, blank=True, verbose_name=gettext_lazy("dead at"))

    class Meta:
        verbose_name = gettext_lazy("outbox event")
        verbose_name_plural = gettext_lazy("outbox events")
        app_label = "ingestion"
        indexes = [
            models.Index(
                fields=["available_at", "id"],
                condition=Q(published_at__isnull=True, dead_at__isnull=True),
                name="outbox_unpublished",
            )
        ]

    def __str__(self) -> str:
        return f"outbox {self.pk} {self.kind}"


class AuditEvent(models.Model):
    """Every repair and every admin action."""

    kind = models.CharField(max_length=64, verbose_name=gettext_lazy("kind"))
    kb = models.ForeignKey(
        "kb.KnowledgeBase",
        verbose_name=gettext_lazy("knowledge base"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    subject_type = models.CharField(max_length=64, verbose_name=gettext_lazy("subject type"))
    subject_id = models.BigIntegerField(
        null=True, blank=True, verbose_name=gettext_lazy("subject id")
    )
    detected_at = models.DateTimeField(
        auto_now_add=True, db_index=True, verbose_name=gettext_lazy("detected at")
    )
    action = models.TextField(blank=True, verbose_name=gettext_lazy("action"))
    attempts = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("attempts"))
    escalated = models.BooleanField(default=False, verbose_name=gettext_lazy("escalated"))
    resolved_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("resolved at")
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=gettext_lazy("actor"),
    )
    details = models.JSONField(default=dict, blank=True, verbose_name=gettext_lazy("details"))

    class Meta:
        # Kept in the ingestion app (its tables, migrations and permissions) from before this
        # floor had its own package; `work` is an app without models of its own label.
        verbose_name = gettext_lazy("audit event")
        verbose_name_plural = gettext_lazy("audit events")
        app_label = "ingestion"
        indexes = [
            models.Index(fields=["kind", "subject_type", "subject_id"], name="audit_subject")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.subject_type}:{self.subject_id}"
