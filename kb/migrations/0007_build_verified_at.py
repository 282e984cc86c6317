"""Build.verified_at: the write stage's record that a build's chunks are complete.

Builds written before this field existed are verified here with the same check the write stage
runs (`kb.completeness.build_completeness`), so the switch and rollback keep accepting them.
"""

from django.db import migrations, models

VERIFY_EXISTING = """
UPDATE kb_build SET verified_at = now() WHERE id IN (
SELECT b.id FROM kb_build b
JOIN kb_indexversion iv ON iv.id = b.index_version_id
CROSS JOIN LATERAL (
         SELECT count(*) AS n, count(embedding) AS embedded, count(DISTINCT ordinal) AS ordinals,
                min(ordinal) AS lo, max(ordinal) AS hi,
                min(vector_dims(embedding)) AS dmin, max(vector_dims(embedding)) AS dmax,
                encode(sha256(convert_to(coalesce(
                    string_agg(content_hash, ',' ORDER BY ordinal), ''), 'UTF8')), 'hex') AS manifest
         FROM kb_chunk c WHERE c.build_id = b.id
     ) f
WHERE b.collected_at IS NULL AND b.expected_chunk_count > 0
  AND f.n = b.expected_chunk_count AND f.embedded = f.n AND f.ordinals = f.n
  AND f.lo = 0 AND f.hi = f.n - 1 AND f.dmin = iv.dimensions AND f.dmax = iv.dimensions
  AND f.manifest = b.manifest_sha256)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("kb", "0006_roles"),
    ]

    operations = [
        migrations.AddField(
            model_name="build",
            name="verified_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunSQL(VERIFY_EXISTING, migrations.RunSQL.noop),
    ]
