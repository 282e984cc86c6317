"""Input and output serializers of the sources' API. They validate shapes and sizes; what a
source may be (its kind's settings, patterns, metadata fields) is `source_check`'s to say.

Credentials are write-only: no output here has a field that could carry them, only
`has_credentials`."""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from retrieval.api.serializers import CursorPageOutput, DocumentPageInput
from sources.kinds.registry import KINDS
from sources.selectors import run_progress

MAX_CONFIG_CHARS = 16_384
MAX_PATTERNS = 200
MAX_GROUPS = 50
MAX_MAPPINGS = 100
MAX_SCHEDULE_MINUTES = 366 * 24 * 60
# A source's latest run read with the list (set by the view), so each row costs no query.
LAST_RUN_ATTR = "_canon_last_run"
_UNREAD = object()


class SourceInput(serializers.Serializer):
    """A new source (every field it needs), or, partial, a change of one (PATCH: only the fields
    given change; `config` is merged into the stored one, a key set to null removes it)."""

    name = serializers.CharField(max_length=200)
    slug = serializers.SlugField(
        max_length=50, help_text="The first part of its documents' keys (slug/path)."
    )
    kind = serializers.ChoiceField(
        choices=sorted(KINDS), help_text="folder, s3, website or git; fixed once created."
    )
    config = serializers.DictField(
        child=serializers.JSONField(allow_null=True),  # PATCH: a key set to null removes it
        help_text="The kind's settings: folder {path}; s3 {bucket, prefix, endpoint_url, region}; "
        "website and git as GET /sources/{id} shows them. Checked by the kind; a setting it "
        "does not take, or a value that cannot work, is a 400 naming it.",
    )
    credentials = serializers.DictField(
        child=serializers.CharField(max_length=4096, allow_blank=True, trim_whitespace=False),
        required=False,
        write_only=True,
        help_text="The kind's secrets (s3: access_key_id, secret_access_key). Stored encrypted and "
        "never returned; a key given as an empty string keeps what is stored.",
    )
    include = serializers.ListField(
        child=serializers.CharField(max_length=500),
        required=False,
        max_length=MAX_PATTERNS,
        help_text="Gitignore-style patterns of the paths to take (none: every path).",
    )
    exclude = serializers.ListField(
        child=serializers.CharField(max_length=500),
        required=False,
        max_length=MAX_PATTERNS,
        help_text="Gitignore-style patterns of the paths to leave out.",
    )
    access_groups = serializers.ListField(
        child=serializers.CharField(max_length=100),
        required=False,
        max_length=MAX_GROUPS,
        help_text="Access groups of every document the source brings; only groups this key holds.",
    )
    metadata_map = serializers.DictField(
        child=serializers.CharField(max_length=100),
        required=False,
        help_text="The source's own fields onto the knowledge base's declared metadata fields: "
        "{source field: knowledge-base field}.",
    )
    sync_every_minutes = serializers.IntegerField(
        min_value=1,
        max_value=MAX_SCHEDULE_MINUTES,
        allow_null=True,
        required=False,
        help_text="Sync on this schedule; null: only when asked.",
    )
    enabled = serializers.BooleanField(required=False, help_text="false: paused.")
    delete_threshold_percent = serializers.IntegerField(
        min_value=1,
        max_value=100,
        required=False,
        help_text="A run that would delete more than this share of the source's documents "
        "waits for confirmation.",
    )

    def validate_config(self, value: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(value)) > MAX_CONFIG_CHARS:
            raise serializers.ValidationError(
                f"The settings are longer than {MAX_CONFIG_CHARS} characters."
            )
        return value

    def validate_metadata_map(self, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_MAPPINGS:
            raise serializers.ValidationError(f"Map at most {MAX_MAPPINGS} fields.")
        if any(len(key) > 200 for key in value):
            raise serializers.ValidationError("A source field's name is at most 200 characters.")
        return value

    def validate_access_groups(self, value: list[str]) -> list[str]:
        return sorted({group.strip() for group in value if group.strip()})


class RunCountsOutput(serializers.Serializer):
    new = serializers.IntegerField()
    changed = serializers.IntegerField()
    unchanged = serializers.IntegerField()
    restored = serializers.IntegerField()
    deleted = serializers.IntegerField()
    failed = serializers.IntegerField()
    skipped = serializers.IntegerField()
    unsupported = serializers.IntegerField(
        help_text="Files of a kind Canon does not read, by their name: not failures, and said in "
        "`problems` only the first time a run meets each one."
    )


class RunSecondsOutput(serializers.Serializer):
    listing = serializers.FloatField()
    fetching = serializers.FloatField()
    submitting = serializers.FloatField()


class RunOutput(serializers.Serializer):
    """A run as `sources.selectors.run_progress` reads it (the admin's progress bar too)."""

    id = serializers.IntegerField()
    # the metaclass takes declared fields out of the class body, so `source` stays DRF's
    source = serializers.IntegerField()  # type: ignore[assignment]
    state = serializers.ChoiceField(
        choices=[
            "queued",
            "listing",
            "syncing",
            "awaiting_confirmation",
            "succeeded",
            "failed",
            "cancelled",
        ]
    )
    state_label = serializers.CharField()
    percent = serializers.IntegerField(allow_null=True)
    listed = serializers.IntegerField(help_text="Items the listing has yielded so far.")
    to_process = serializers.IntegerField(help_text="New or changed items to fetch and submit.")
    processed = serializers.IntegerField()
    counts = RunCountsOutput()
    deletions_planned = serializers.IntegerField()
    deletion_note = serializers.CharField(
        allow_blank=True, help_text="Why nothing was deleted, or why deletions wait."
    )
    listing_complete = serializers.BooleanField()
    error = serializers.CharField(allow_blank=True)
    trigger = serializers.ChoiceField(choices=["schedule", "manual", "api"])
    created_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    seconds = RunSecondsOutput()

    def to_representation(self, instance: Any) -> Any:
        return {**run_progress(instance), "source": instance.source_id}


class ProblemOutput(serializers.Serializer):
    path = serializers.CharField()
    outcome = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)


class RunDetailOutput(RunOutput):
    problems = ProblemOutput(
        many=True, help_text="Items the run failed or skipped, and why (the first 500)."
    )
    pending_deletions = serializers.IntegerField(
        help_text="Documents the run holds for a person to confirm deleting (awaiting "
        "confirmation), or 0."
    )

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)
        data["problems"] = [
            {
                "path": str(problem.get("path", "")),
                "outcome": str(problem.get("outcome", "")),
                "reason": str(problem.get("reason", "")),
            }
            for problem in instance.problems or []
        ]
        data["pending_deletions"] = instance.pending_deletes.count()
        return data


class RunAnswerOutput(RunDetailOutput):
    """A confirmation's answer: the run after it, and how many documents it deleted or kept."""

    documents = serializers.IntegerField(help_text="How many documents were deleted, or kept.")

    def to_representation(self, instance: Any) -> Any:
        run, documents = instance
        return {**RunDetailOutput(run).data, "documents": documents}


class RunPageInput(DocumentPageInput):
    """`cursor` is the `next_cursor` of the previous page; runs come newest first."""


class RunPageOutput(CursorPageOutput):
    item = RunOutput
    results = RunOutput(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class SourceOutput(serializers.Serializer):
    id = serializers.IntegerField()
    kb = serializers.CharField(source="kb.slug")
    name = serializers.CharField()
    slug = serializers.CharField()
    kind = serializers.CharField()
    config = serializers.DictField(child=serializers.JSONField())
    has_credentials = serializers.BooleanField(
        help_text="Credentials are stored (they are never returned)."
    )
    include = serializers.ListField(child=serializers.CharField())
    exclude = serializers.ListField(child=serializers.CharField())
    access_groups = serializers.ListField(child=serializers.CharField())
    metadata_map = serializers.DictField(child=serializers.CharField())
    sync_every_minutes = serializers.IntegerField(allow_null=True)
    enabled = serializers.BooleanField()
    delete_threshold_percent = serializers.IntegerField()
    next_sync_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    last_run = serializers.SerializerMethodField()

    @extend_schema_field(RunOutput(allow_null=True))
    def get_last_run(self, source: Any) -> dict[str, Any] | None:
        run = getattr(source, LAST_RUN_ATTR, _UNREAD)
        if run is _UNREAD:
            run = source.runs.order_by("-created_at", "-pk").first()
        return RunOutput(run).data if run is not None else None


class SourceListOutput(serializers.Serializer):
    results = SourceOutput(many=True)


class SyncOutput(serializers.Serializer):
    created = serializers.BooleanField(
        help_text="true: this request started the run; false: a run was already open."
    )
    run = RunOutput()
