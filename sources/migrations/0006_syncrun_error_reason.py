"""Why a sync run failed, stopped or waits, as a declared reason's code and values beside the
English (issue 41, item 5): the admin words it in the person's language, the API keeps the
English. Both have a database default, so a worker still running the previous code can write a
run meanwhile; runs from before keep "" and {} and show their English as stored."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sources", "0005_alter_source_options_alter_sourceitem_options_and_more"),
    ]

    operations = [
        migrations.AddField(
            model_name="syncrun",
            name="error_reason",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                max_length=64,
                verbose_name="error reason",
            ),
        ),
        migrations.AddField(
            model_name="syncrun",
            name="error_params",
            field=models.JSONField(
                blank=True, db_default={}, default=dict, verbose_name="error values"
            ),
        ),
    ]
