"""Build.chunks_embedded: how many of a build's chunks have a vector, set by the embed stage.

Existing rows start at 0 (a database default, so adding the column rewrites no rows); the admin's
progress counts a written chunk as embedded (`kb.selectors.builds.build_progress_of`), so finished builds
need no backfill.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("kb", "0009_keyword_index_without_redundant_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="build",
            name="chunks_embedded",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
    ]
