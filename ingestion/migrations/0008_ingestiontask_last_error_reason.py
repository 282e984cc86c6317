"""Why a task's last attempt failed, as a declared reason's code and values beside the English
(issue 41, item 5): the admin words it in the person's language (`kb.failures`), the logs keep
the English. Both have a database default, so a worker still running the previous code can
write a task meanwhile; rows from before keep "" and {} and show their English as stored."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ingestion", "0007_ingestiontask_kind_calibration"),
    ]

    operations = [
        migrations.AddField(
            model_name="ingestiontask",
            name="last_error_reason",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                max_length=64,
                verbose_name="last error reason",
            ),
        ),
        migrations.AddField(
            model_name="ingestiontask",
            name="last_error_params",
            field=models.JSONField(
                blank=True, db_default={}, default=dict, verbose_name="last error values"
            ),
        ),
    ]
