"""Search indexes, built concurrently so a large kb_chunk keeps taking writes meanwhile."""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations


def ensure_ann_indexes(apps, schema_editor):
    from kb.ann import ann_index_ensure

    IndexVersion = apps.get_model("kb", "IndexVersion")
    for version_id in IndexVersion.objects.exclude(state="failed").values_list("id", flat=True):
        ann_index_ensure(version_id=version_id)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("kb", "0002_document_purged_at"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="chunk",
            index=GinIndex(fields=["lexical"], name="chunk_lexical_gin"),
        ),
        migrations.RunPython(ensure_ann_indexes, migrations.RunPython.noop),
    ]
