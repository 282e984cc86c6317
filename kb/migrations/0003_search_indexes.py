"""Search indexes, built concurrently so a large kb_chunk keeps taking writes meanwhile."""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations


def ensure_ann_indexes(apps, schema_editor):
    # The index as kb.ann built it at this migration (vector storage only), from the historical
    # model: the live kb.ann reads columns added later (IndexVersion.vector_storage).
    IndexVersion = apps.get_model("kb", "IndexVersion")
    versions = IndexVersion.objects.exclude(state="failed").values_list("id", "dimensions")
    with schema_editor.connection.cursor() as cursor:
        for version_id, dimensions in versions:
            cursor.execute(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS kb_chunk_hnsw_iv{int(version_id)} "
                f"ON kb_chunk USING hnsw ((embedding::vector({int(dimensions)})) "
                "vector_cosine_ops) WITH (m = 16, ef_construction = 64) "
                f"WHERE index_version_id = {int(version_id)}"
            )


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
