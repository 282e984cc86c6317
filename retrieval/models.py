"""Principals for the search API: API keys stored as SHA-256 hashes with a visible prefix."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models


class ApiKey(models.Model):
    tenant = models.ForeignKey("kb.Tenant", on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    knowledge_bases = models.ManyToManyField("kb.KnowledgeBase", blank=True, related_name="+")
    access_groups = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
