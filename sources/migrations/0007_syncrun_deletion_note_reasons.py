"""The declared reasons of a sync run's deletion note, beside its English (issue 41, item 5): the
admin words them in the person's language, the API keeps the English. A database default, so a
worker still running the previous code can write a run meanwhile; runs from before keep [] and
show their English as stored."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sources", "0006_syncrun_error_reason"),
    ]

    operations = [
        migrations.AddField(
            model_name="syncrun",
            name="deletion_note_reasons",
            field=models.JSONField(
                blank=True, db_default=[], default=list, verbose_name="deletion note reasons"
            ),
        ),
    ]
