"""Principals for the search API (API keys stored as SHA-256 hashes with a visible prefix) and
the idempotency records of API uploads."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils.translation import gettext_lazy


class ApiKey(models.Model):
    tenant = models.ForeignKey(
        "kb.Tenant",
        on_delete=models.CASCADE,
        related_name="api_keys",
        verbose_name=gettext_lazy("tenant"),
    )
    name = models.CharField(max_length=200, verbose_name=gettext_lazy("name"))
    prefix = models.CharField(max_length=16, unique=True, verbose_name=gettext_lazy("prefix"))
    key_hash = models.CharField(max_length=64, verbose_name=gettext_lazy("key hash"))
    knowledge_bases = models.ManyToManyField(
        "kb.KnowledgeBase",
        blank=True,
        related_name="+",
        verbose_name=gettext_lazy("knowledge bases"),
    )
    access_groups = ArrayField(
        models.CharField(max_length=100),
        default=list,
        blank=True,
        verbose_name=gettext_lazy("access groups"),
    )
    can_read_history = models.BooleanField(
        default=False,
        help_text=gettext_lazy("May search as of a past time (index admins' services)."),
        verbose_name=gettext_lazy("can read history"),
    )
    can_manage_sources = models.BooleanField(
        default=False,
        help_text=gettext_lazy(
            "May list, create, change and sync the sources of its knowledge bases and "
            "confirm their deletions (/api/v1/…/sources)."
        ),
        verbose_name=gettext_lazy("can manage sources"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))
    expires_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("expires at")
    )
    revoked_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("revoked at")
    )
    last_used_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("last used at")
    )

    class Meta:
        verbose_name = gettext_lazy("API key")
        verbose_name_plural = gettext_lazy("API keys")

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class IdempotencyRecord(models.Model):
    """The outcome of an API upload, keyed by the client's Idempotency-Key within the principal
    (API key or session user) that sent it, and its tenant.

    Written in the same transaction as the upload it records, so a record exists if and only if
    the upload happened. A repeat by the same principal with the same key and the same request
    returns the stored response; the same key with a different request is refused (409).
    Another principal's request with the same key is its own: it never sees this record."""

    tenant = models.ForeignKey("kb.Tenant", on_delete=models.CASCADE, related_name="+")
    # Principal.ident: "key:<id>" or "user:<id>"; "" for records made before principals were
    # recorded, which no principal can replay.
    principal = models.CharField(max_length=64, default="")
    key = models.CharField(max_length=255)
    request_sha256 = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "principal", "key"], name="idempotency_unique_principal_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.key} -> {self.response_status}"


class FusionCalibration(models.Model):
    """The learned fusion's parameters a knowledge base adopted (issue 39, item 6): search
    fuses that knowledge base's hybrid legs by them instead of the shipped default
    (`retrieval.search.parameters`). No row: the default.

    Retrieval's own row, so search reads it without importing evaluation (the floor above,
    which computes and judges calibrations: `evaluation.services.calibration`). Written and
    deleted only by those services, under the knowledge base's row lock; `calibration_id`
    names evaluation's record of where the parameters came from (not a foreign key: a lower
    floor does not point up)."""

    kb = models.OneToOneField(
        "kb.KnowledgeBase",
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.CASCADE,
        related_name="fusion_calibration",
    )
    # As `fusion_model.json` holds them (`fusion_fitting.parameters_of`).
    parameters = models.JSONField(verbose_name=gettext_lazy("parameters"))
    calibration_id = models.BigIntegerField(verbose_name=gettext_lazy("calibration"))
    adopted_at = models.DateTimeField(auto_now=True, verbose_name=gettext_lazy("adopted at"))

    class Meta:
        verbose_name = gettext_lazy("adopted fusion calibration")
        verbose_name_plural = gettext_lazy("adopted fusion calibrations")

    def __str__(self) -> str:
        return f"Fusion calibration {self.calibration_id} of {self.kb_id}"
