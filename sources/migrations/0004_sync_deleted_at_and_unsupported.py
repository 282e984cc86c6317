"""A sync restores only a document it deleted itself (`SourceItem.sync_deleted_at`), and counts
files of a kind Canon does not read apart from failures (`SyncRun.unsupported`).

Items already gone: the document's deletion is the sync's when its latest delete event is the
sync's ("deleted by sync of …"); a person's deletion leaves `sync_deleted_at` empty, so it stands."""

from django.db import migrations, models

SYNC_DELETE_PREFIX = "deleted by sync of "


def mark_sync_deletions(apps, schema_editor):  # type: ignore[no-untyped-def]
    SourceItem = apps.get_model("sources", "SourceItem")
    PublicationEvent = apps.get_model("kb", "PublicationEvent")
    rows = SourceItem.objects.filter(
        gone_at__isnull=False, document__isnull=False, document__deleted_at__isnull=False
    ).select_related("document")
    for row in rows.iterator(chunk_size=1000):
        latest = (
            PublicationEvent.objects.filter(document_id=row.document_id, action="delete")
            .order_by("-pk")
            .values_list("reason", flat=True)
            .first()
        )
        if latest is not None and latest.startswith(SYNC_DELETE_PREFIX):
            SourceItem.objects.filter(pk=row.pk).update(sync_deleted_at=row.document.deleted_at)


class Migration(migrations.Migration):
    dependencies = [
        ("sources", "0003_slug_help"),
        ("kb", "0021_visibility_statistics"),
    ]

    operations = [
        migrations.AddField(
            model_name="sourceitem",
            name="sync_deleted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="syncrun",
            name="unsupported",
            field=models.PositiveIntegerField(default=0, verbose_name="not supported"),
        ),
        migrations.RunPython(mark_sync_deletions, migrations.RunPython.noop),
    ]
