"""Sources, their sync runs, and the manifest of what each source held at its last run."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext, gettext_lazy


class Source(models.Model):
    """Where a knowledge base's documents live: a folder, an S3 bucket, a website, a Git
    repository. Its documents' keys are `<slug>/<path>`. Credentials are stored encrypted
    (`sources.secrets`) and never shown again."""

    class Kind(models.TextChoices):
        FOLDER = "folder", gettext_lazy("folder")
        S3 = "s3", gettext_lazy("S3 bucket")
        WEBSITE = "website", gettext_lazy("website")
        GIT = "git", gettext_lazy("Git repository")

    kb = models.ForeignKey(
        "kb.KnowledgeBase",
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.PROTECT,
        related_name="sources",
    )
    name = models.CharField(max_length=200, verbose_name=gettext_lazy("name"))
    slug = models.SlugField(
        max_length=50,
        help_text=gettext_lazy("The first part of its documents' keys (slug/path)."),
        verbose_name=gettext_lazy("slug"),
    )
    kind = models.CharField(max_length=16, choices=Kind.choices, verbose_name=gettext_lazy("kind"))
    config = models.JSONField(default=dict, blank=True, verbose_name=gettext_lazy("config"))
    credentials_encrypted = models.TextField(
        blank=True, editable=False, verbose_name=gettext_lazy("credentials encrypted")
    )
    include = models.JSONField(default=list, blank=True, verbose_name=gettext_lazy("include"))
    exclude = models.JSONField(default=list, blank=True, verbose_name=gettext_lazy("exclude"))
    access_groups = models.JSONField(
        default=list,
        blank=True,
        help_text=gettext_lazy("Access groups of every document this source brings."),
        verbose_name=gettext_lazy("access groups"),
    )
    metadata_map = models.JSONField(
        default=dict,
        blank=True,
        help_text=gettext_lazy(
            "The source's own fields (object tags, front matter, HTML meta) onto the "
            "knowledge base's metadata fields: {source field: knowledge-base field}."
        ),
        verbose_name=gettext_lazy("metadata map"),
    )
    sync_every_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=gettext_lazy("Empty: only when someone asks for a sync."),
        verbose_name=gettext_lazy("sync every minutes"),
    )
    enabled = models.BooleanField(
        default=True,
        help_text=gettext_lazy("A paused source is never synced."),
        verbose_name=gettext_lazy("enabled"),
    )
    delete_threshold_percent = models.PositiveSmallIntegerField(
        default=20,
        help_text=gettext_lazy(
            "A run that would delete more than this share of the source's documents "
            "waits for a person to confirm."
        ),
        verbose_name=gettext_lazy("delete threshold percent"),
    )
    next_sync_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("next sync at")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=gettext_lazy("updated at"))

    class Meta:
        verbose_name = gettext_lazy("source")
        verbose_name_plural = gettext_lazy("sources")
        constraints = [
            models.UniqueConstraint(fields=["kb", "slug"], name="source_slug_per_kb"),
        ]
        permissions = [("sync_source", gettext_lazy("Can sync a source and confirm its deletions"))]

    def __str__(self) -> str:
        return self.name

    @property
    def has_credentials(self) -> bool:
        return bool(self.credentials_encrypted)


class SyncRun(models.Model):
    """One sync of a source: leased work (`task`), its counts, and its problems."""

    class State(models.TextChoices):
        QUEUED = "queued", gettext_lazy("Queued")
        LISTING = "listing", gettext_lazy("Listing")
        SYNCING = "syncing", gettext_lazy("Syncing")
        AWAITING_CONFIRMATION = "awaiting_confirmation", gettext_lazy("awaiting confirmation")
        SUCCEEDED = "succeeded", gettext_lazy("Succeeded")
        FAILED = "failed", gettext_lazy("Failed")
        CANCELLED = "cancelled", gettext_lazy("Cancelled")

    OPEN_STATES = (State.QUEUED, State.LISTING, State.SYNCING)

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule", gettext_lazy("Schedule")
        MANUAL = "manual", gettext_lazy("Manual")
        API = "api", gettext_lazy("Api")

    source = models.ForeignKey(
        Source, on_delete=models.CASCADE, related_name="runs", verbose_name=gettext_lazy("source")
    )
    task = models.OneToOneField(
        "ingestion.IngestionTask",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="sync_run",
        verbose_name=gettext_lazy("task"),
    )
    state = models.CharField(
        max_length=24,
        choices=State.choices,
        default=State.QUEUED,
        verbose_name=gettext_lazy("state"),
    )
    trigger = models.CharField(
        max_length=16,
        choices=Trigger.choices,
        default=Trigger.MANUAL,
        verbose_name=gettext_lazy("trigger"),
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=gettext_lazy("requested by"),
    )
    listed = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("listed"))
    to_process = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("to process"))
    processed = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("processed"))
    new = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("new"))
    changed = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("changed"))
    unchanged = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("unchanged"))
    deleted = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("deleted"))
    restored = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("restored"))
    failed = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("failed"))
    skipped = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("skipped"))
    # Files of a kind Canon does not read (by their name): counted apart from failures, and
    # said in `problems` only the first time a run meets each one.
    unsupported = models.PositiveIntegerField(gettext_lazy("not supported"), default=0)
    listing_complete = models.BooleanField(
        default=False, verbose_name=gettext_lazy("listing complete")
    )
    # Why nothing was deleted, or why deletions wait for a person, and a person's answer; "" when
    # they went ahead. In English (the API's words); beside it the declared reasons its sentences
    # are ([{code, params}], `sources.deletion_notes`), which the admin words in the person's
    # language when they still say its English. Runs from before keep [] and show their English.
    deletion_note = models.TextField(blank=True, verbose_name=gettext_lazy("deletion note"))
    deletion_note_reasons = models.JSONField(
        blank=True,
        default=list,
        db_default=[],
        verbose_name=gettext_lazy("deletion note reasons"),
    )
    deletions_planned = models.PositiveIntegerField(
        default=0, verbose_name=gettext_lazy("deletions planned")
    )
    # Per-item outcomes worth reading: [{path, outcome, reason}], the first PROBLEMS_KEPT;
    # `reason` is English (the API's words), and a declared reason adds its `code` and `params`
    # (and `file`, the file its English names first) for the admin to word in the person's
    # language (`console.admin.sync_words`).
    problems = models.JSONField(default=list, blank=True, verbose_name=gettext_lazy("problems"))
    # Why the run failed, stopped or waits, in English (the API's and the logs' words); for a
    # declared reason (`textkit.reasons`), its code and values beside it, which the admin words
    # in the person's language. Runs from before keep "" and {} and show their English.
    error = models.TextField(blank=True, verbose_name=gettext_lazy("error"))
    error_reason = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_default="",
        verbose_name=gettext_lazy("error reason"),
    )
    error_params = models.JSONField(
        blank=True, default=dict, db_default={}, verbose_name=gettext_lazy("error values")
    )
    seconds_listing = models.FloatField(default=0, verbose_name=gettext_lazy("seconds listing"))
    seconds_fetching = models.FloatField(default=0, verbose_name=gettext_lazy("seconds fetching"))
    seconds_submitting = models.FloatField(
        default=0, verbose_name=gettext_lazy("seconds submitting")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))
    started_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("started at")
    )
    finished_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("finished at")
    )
    confirmed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=gettext_lazy("confirmed by"),
    )
    confirmed_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("confirmed at")
    )

    class Meta:
        verbose_name = gettext_lazy("sync run")
        verbose_name_plural = gettext_lazy("sync runs")
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
        return gettext("Run %(id)s (%(state)s)") % {
            "id": self.pk,
            "state": self.get_state_display().lower(),
        }


class SourceItem(models.Model):
    """The manifest: one row per path a source held, the version Canon took, and its document.

    `version` is written in the same transaction as the revision it produced, so a retried or
    duplicated run finds it and submits nothing twice. `gone_at` is set when the item left the
    source (its document deleted by the sync, `sync_deleted_at`, or already deleted by a
    person); `pending_delete_run` marks it as one of the deletions a run holds for
    confirmation. `last_seen_run` and `last_outcome` say what the latest run did with the item;
    a run's counts are its rows' outcomes, so a run resumed after a crash counts each item once,
    by what any of its attempts did."""

    source = models.ForeignKey(
        Source, on_delete=models.CASCADE, related_name="items", verbose_name=gettext_lazy("source")
    )
    path = models.TextField(verbose_name=gettext_lazy("path"))
    document = models.OneToOneField(
        "kb.Document",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="source_item",
        verbose_name=gettext_lazy("document"),
    )
    version = models.CharField(max_length=200, blank=True, verbose_name=gettext_lazy("version"))
    sha256 = models.CharField(max_length=64, blank=True, verbose_name=gettext_lazy("sha256"))
    size = models.BigIntegerField(null=True, blank=True, verbose_name=gettext_lazy("size"))
    modified = models.DateTimeField(null=True, blank=True, verbose_name=gettext_lazy("modified"))
    state = models.JSONField(default=dict, blank=True, verbose_name=gettext_lazy("state"))
    revision_number = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=gettext_lazy("revision number")
    )
    # new, changed, restored, unchanged, failed, skipped, unsupported or deleted.
    last_outcome = models.CharField(
        max_length=16, blank=True, verbose_name=gettext_lazy("last outcome")
    )
    last_seen_run = models.ForeignKey(
        SyncRun,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=gettext_lazy("last seen run"),
    )
    gone_at = models.DateTimeField(null=True, blank=True, verbose_name=gettext_lazy("gone at"))
    # The `deleted_at` the sync gave the document when the item left the source. The sync may
    # restore the document when the item comes back only while this is still its deletion: a
    # deletion by a person (before, or after a restore) stands until a person restores it.
    sync_deleted_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("sync deleted at")
    )
    pending_delete_run = models.ForeignKey(
        SyncRun,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="pending_deletes",
        verbose_name=gettext_lazy("pending delete run"),
    )
    updated_at = models.DateTimeField(auto_now=True, verbose_name=gettext_lazy("updated at"))

    class Meta:
        verbose_name = gettext_lazy("source item")
        verbose_name_plural = gettext_lazy("source items")
        constraints = [
            models.UniqueConstraint(fields=["source", "path"], name="source_item_path"),
        ]

    def __str__(self) -> str:
        return self.path
