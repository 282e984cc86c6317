"""Sources, their sync runs, and the manifest of what each source held at its last run."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Source(models.Model):
    """Where a knowledge base's documents live: a folder, an S3 bucket, a website, a Git
    repository. Its documents' keys are `<slug>/<path>`. Credentials are stored encrypted
    (`sources.secrets`) and never shown again."""

    class Kind(models.TextChoices):
        FOLDER = "folder", "folder"
        S3 = "s3", "S3 bucket"
        WEBSITE = "website", "website"
        GIT = "git", "Git repository"

    kb = models.ForeignKey(
        "kb.KnowledgeBase",
        verbose_name="knowledge base",
        on_delete=models.PROTECT,
        related_name="sources",
    )
    name = models.CharField(max_length=200)
    slug = models.SlugField(
        max_length=50, help_text="The first part of its documents' keys (slug/path)."
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    config = models.JSONField(default=dict, blank=True)
    credentials_encrypted = models.TextField(blank=True, editable=False)
    include = models.JSONField(default=list, blank=True)
    exclude = models.JSONField(default=list, blank=True)
    access_groups = models.JSONField(
        default=list, blank=True, help_text="Access groups of every document this source brings."
    )
    metadata_map = models.JSONField(
        default=dict,
        blank=True,
        help_text="The source's own fields (object tags, front matter, HTML meta) onto the "
        "knowledge base's metadata fields: {source field: knowledge-base field}.",
    )
    sync_every_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="Empty: only when someone asks for a sync."
    )
    enabled = models.BooleanField(default=True, help_text="A paused source is never synced.")
    delete_threshold_percent = models.PositiveSmallIntegerField(
        default=20,
        help_text="A run that would delete more than this share of the source's documents "
        "waits for a person to confirm.",
    )
    next_sync_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kb", "slug"], name="source_slug_per_kb"),
        ]
        permissions = [("sync_source", "Can sync a source and confirm its deletions")]

    def __str__(self) -> str:
        return self.name

    @property
    def has_credentials(self) -> bool:
        return bool(self.credentials_encrypted)


class SyncRun(models.Model):
    """One sync of a source: leased work (`task`), its counts, and its problems."""

    class State(models.TextChoices):
        QUEUED = "queued"
        LISTING = "listing"
        SYNCING = "syncing"
        AWAITING_CONFIRMATION = "awaiting_confirmation", "awaiting confirmation"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    OPEN_STATES = (State.QUEUED, State.LISTING, State.SYNCING)

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule"
        MANUAL = "manual"
        API = "api"

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="runs")
    task = models.OneToOneField(
        "ingestion.IngestionTask",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="sync_run",
    )
    state = models.CharField(max_length=24, choices=State.choices, default=State.QUEUED)
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.MANUAL)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    listed = models.PositiveIntegerField(default=0)
    to_process = models.PositiveIntegerField(default=0)
    processed = models.PositiveIntegerField(default=0)
    new = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)
    unchanged = models.PositiveIntegerField(default=0)
    deleted = models.PositiveIntegerField(default=0)
    restored = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    # Files of a kind Canon does not read (by their name): counted apart from failures, and
    # said in `problems` only the first time a run meets each one.
    unsupported = models.PositiveIntegerField("not supported", default=0)
    listing_complete = models.BooleanField(default=False)
    # Why nothing was deleted, or why deletions wait for a person; "" when they went ahead.
    deletion_note = models.TextField(blank=True)
    deletions_planned = models.PositiveIntegerField(default=0)
    # Per-item outcomes worth reading: [{path, outcome, reason}], the first PROBLEMS_KEPT.
    problems = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    seconds_listing = models.FloatField(default=0)
    seconds_fetching = models.FloatField(default=0)
    seconds_submitting = models.FloatField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    confirmed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    confirmed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # One run at a time per source: a second "sync now" finds the first.
            models.UniqueConstraint(
                fields=["source"],
                condition=Q(state__in=["queued", "listing", "syncing"]),
                name="sync_run_one_open_per_source",
            ),
        ]
        indexes = [models.Index(fields=["source", "-created_at"], name="sync_run_recent")]

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.get_state_display().lower()})"


class SourceItem(models.Model):
    """The manifest: one row per path a source held, the version Canon took, and its document.

    `version` is written in the same transaction as the revision it produced, so a retried or
    duplicated run finds it and submits nothing twice. `gone_at` is set when the item left the
    source (its document deleted by the sync, `sync_deleted_at`, or already deleted by a
    person); `pending_delete_run` marks it as one of the deletions a run holds for
    confirmation. `last_seen_run` and `last_outcome` say what the latest run did with the item;
    a run's counts are its rows' outcomes, so a run resumed after a crash counts each item once,
    by what any of its attempts did."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="items")
    path = models.TextField()
    document = models.OneToOneField(
        "kb.Document",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="source_item",
    )
    version = models.CharField(max_length=200, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    size = models.BigIntegerField(null=True, blank=True)
    modified = models.DateTimeField(null=True, blank=True)
    state = models.JSONField(default=dict, blank=True)
    revision_number = models.PositiveIntegerField(null=True, blank=True)
    # new, changed, restored, unchanged, failed, skipped, unsupported or deleted.
    last_outcome = models.CharField(max_length=16, blank=True)
    last_seen_run = models.ForeignKey(
        SyncRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    gone_at = models.DateTimeField(null=True, blank=True)
    # The `deleted_at` the sync gave the document when the item left the source. The sync may
    # restore the document when the item comes back only while this is still its deletion: a
    # deletion by a person (before, or after a restore) stands until a person restores it.
    sync_deleted_at = models.DateTimeField(null=True, blank=True)
    pending_delete_run = models.ForeignKey(
        SyncRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="pending_deletes"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "path"], name="source_item_path"),
        ]

    def __str__(self) -> str:
        return self.path
