"""Build.text_path: the extracted text a build was chunked from, for citations and search
context. Filled for existing builds from their parse StageResults (the build's own task's, else
the newest of any build of the same revision: parse is a shared stage, so a build that reused
another's result has none of its own)."""

from django.db import migrations, models

BACKFILL = """
DO $$
BEGIN
  IF to_regclass('ingestion_stageresult') IS NULL THEN
    RETURN;
  END IF;
  UPDATE kb_build b SET text_path = own.path
  FROM (
    SELECT DISTINCT ON (t.build_id) t.build_id, s.output->>'text_path' AS path
    FROM ingestion_stageresult s JOIN ingestion_ingestiontask t ON t.id = s.task_id
    WHERE s.stage = 'parse' AND s.status = 'succeeded' AND t.build_id IS NOT NULL
      AND coalesce(s.output->>'text_path', '') <> ''
    ORDER BY t.build_id, s.id DESC
  ) own
  WHERE own.build_id = b.id AND b.text_path = '';
  UPDATE kb_build b SET text_path = rev.path
  FROM (
    SELECT DISTINCT ON (bb.revision_id) bb.revision_id, s.output->>'text_path' AS path
    FROM ingestion_stageresult s
    JOIN ingestion_ingestiontask t ON t.id = s.task_id
    JOIN kb_build bb ON bb.id = t.build_id
    WHERE s.stage = 'parse' AND s.status = 'succeeded'
      AND coalesce(s.output->>'text_path', '') <> ''
    ORDER BY bb.revision_id, s.id DESC
  ) rev
  WHERE rev.revision_id = b.revision_id AND b.text_path = '';
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("kb", "0018_metadata_fields"),
    ]

    operations = [
        migrations.AddField(
            model_name="build",
            name="text_path",
            field=models.CharField(blank=True, db_default="", default="", max_length=300),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
    ]
