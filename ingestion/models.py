"""The pipeline's own records: stage results (a stage's idempotency record) and the embedding
cache. The tasks, outbox events and audit trail they hang from are `work.models`."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy
from pgvector.django import VectorField

from work.models import IngestionTask


class StageResult(models.Model):
    """Per-stage idempotency record: a succeeded result for the same input is reused."""

    class Stage(models.TextChoices):
        PARSE = "parse", gettext_lazy("Parse")
        CHUNK = "chunk", gettext_lazy("Chunk")
        EMBED = "embed", gettext_lazy("Embed")
        WRITE = "write", gettext_lazy("Write")
        FINALIZE = "finalize", gettext_lazy("Finalize")

    class Status(models.TextChoices):
        RUNNING = "running", gettext_lazy("Running")
        SUCCEEDED = "succeeded", gettext_lazy("Succeeded")
        FAILED = "failed", gettext_lazy("Failed")

    task = models.ForeignKey(
        IngestionTask,
        on_delete=models.CASCADE,
        related_name="stage_results",
        verbose_name=gettext_lazy("task"),
    )
    stage = models.CharField(
        max_length=16, choices=Stage.choices, verbose_name=gettext_lazy("stage")
    )
    input_fingerprint = models.CharField(
        max_length=64, verbose_name=gettext_lazy("input fingerprint")
    )
    pipeline_version = models.CharField(
        max_length=32, verbose_name=gettext_lazy("pipeline version")
    )
    status = models.CharField(
        max_length=16,
        choices=Status.choices,
        default=Status.RUNNING,
        verbose_name=gettext_lazy("status"),
    )
    output = models.JSONField(default=dict, verbose_name=gettext_lazy("output"))
    attempts = models.PositiveIntegerField(default=1, verbose_name=gettext_lazy("attempts"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=gettext_lazy("updated at"))

    class Meta:
        verbose_name = gettext_lazy("stage result")
        verbose_name_plural = gettext_lazy("stage results")
        constraints = [
            models.UniqueConstraint(
                fields=["task", "stage", "input_fingerprint", "pipeline_version"],
                name="stage_result_identity",
            )
        ]
        # A shared stage's result is found by its input alone
        # (`ingestion.pipeline.stages.stage_run`).
        indexes = [
            models.Index(
                fields=["stage", "input_fingerprint", "pipeline_version"],
                condition=models.Q(status="succeeded"),
                name="stage_result_by_input",
            )
        ]

    def __str__(self) -> str:
        return f"{self.stage} of task {self.task_id} ({self.status})"


class EmbeddingCache(models.Model):
    """(model, content hash) -> vector, so unchanged text is never embedded twice."""

    model = models.CharField(max_length=200)
    content_hash = models.CharField(max_length=64)
    dimensions = models.PositiveIntegerField()
    embedding = VectorField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["model", "dimensions", "content_hash"], name="embedding_cache_identity"
            )
        ]

    def __str__(self) -> str:
        return f"{self.model}:{self.content_hash[:12]}"
