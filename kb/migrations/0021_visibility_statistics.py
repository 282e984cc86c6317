"""Extended statistics for the visibility rule's estimate: a chunk's and a publication pointer's
knowledge base follow from their index version. Without them PostgreSQL multiplies the two
conditions' selectivities as if independent and, with several knowledge bases in one table,
estimated 318 visible chunks of a 23,081-chunk knowledge base, so it sorted them all exactly
instead of walking the version's HNSW index: 116 ms against 8 ms (docs/BENCHMARKS.md, "Cross-KB
fusion quality"). PostgreSQL fills them at its next ANALYZE (autovacuum's, or the one below)."""

from django.db import migrations

STATISTICS = (
    ("kb_chunk_version_kb", "kb_chunk"),
    ("kb_publication_version_kb", "kb_publication"),
)


class Migration(migrations.Migration):
    dependencies = [("kb", "0020_metadata_field_roles")]

    operations = [
        migrations.RunSQL(
            [
                f"CREATE STATISTICS IF NOT EXISTS {name} (dependencies) "
                f"ON index_version_id, kb_id FROM {table}"
                for name, table in STATISTICS
            ]
            + [f"ANALYZE {table}" for _, table in STATISTICS],
            [f"DROP STATISTICS IF EXISTS {name}" for name, _ in STATISTICS],
        ),
    ]
