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


class IngestionTask(models.Model):
    """One unit of work, claimed with a lease (see `work.leases`)."""

    class Kind(models.TextChoices):
        BUILD = "build"
        DELETE = "delete"
        GC = "gc"
        SYNC = "sync"  # a source's sync run (sources.sync)
        EVALUATION = "evaluation"  # a question set asked of an index version (evaluation.run)

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        RETRY_WAIT = "retry_wait"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        DEAD = "dead"

    # A task still to run or running; the others are closed for good.
    OPEN_STATUSES = (Status.QUEUED, Status.RUNNING, Status.RETRY_WAIT)

    kind = models.CharField(max_length=16, choices=Kind.choices)
    kb = models.ForeignKey(
        "kb.KnowledgeBase",
        verbose_name="knowledge base",
        on_delete=models.PROTECT,
        related_name="+",
    )
    document = models.ForeignKey(
        "kb.Document", null=True, blank=True, on_delete=models.PROTECT, related_name="tasks"
    )
    build = models.ForeignKey(
        "kb.Build", null=True, blank=True, on_delete=models.CASCADE, related_name="tasks"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    attempt = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=5)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    available_at = models.DateTimeField(null=True, blank=True)
    last_error_code = models.CharField(max_length=64, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # Kept in the ingestion app (its tables, migrations and permissions) from before this
        # floor had its own package; `work` is an app without models of its own label.
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
        RUN_TASK = "run_task"

    kind = models.CharField(max_length=32, choices=Kind.choices, default=Kind.RUN_TASK)
    task = models.ForeignKey(
        IngestionTask, null=True, blank=True, on_delete=models.CASCADE, related_name="events"
    )
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    available_at = models.DateTimeField()
    published_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    dead_at = models.DateTimeField(null=True, blank=True)

    class Meta:
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

    kind = models.CharField(max_length=64)
    kb = models.ForeignKey(
        "kb.KnowledgeBase",
        verbose_name="knowledge base",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    subject_type = models.CharField(max_length=64)
    subject_id = models.BigIntegerField(null=True, blank=True)
    detected_at = models.DateTimeField(auto_now_add=True, db_index=True)
    action = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    escalated = models.BooleanField(default=False)
    resolved_at = models.DateTimeField(null=True, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        # Kept in the ingestion app (its tables, migrations and permissions) from before this
        # floor had its own package; `work` is an app without models of its own label.
        app_label = "ingestion"
        indexes = [
            models.Index(fields=["kind", "subject_type", "subject_id"], name="audit_subject")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.subject_type}:{self.subject_id}"
