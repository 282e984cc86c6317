"""Why a build failed, as a code and its values beside the English sentence (issue 41, item 5):
the admin words a stored reason in the person's language (`kb.failures`), the API keeps the
English. Both have a database default, so a process still running the previous code can write a
build meanwhile; rows from before keep "" and {} and show their English as stored."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("kb", "0023_verbose_names"),
    ]

    operations = [
        migrations.AddField(
            model_name="build",
            name="error_code",
            field=models.CharField(
                blank=True, db_default="", default="", max_length=64, verbose_name="error code"
            ),
        ),
        migrations.AddField(
            model_name="build",
            name="error_params",
            field=models.JSONField(
                blank=True, db_default={}, default=dict, verbose_name="error values"
            ),
        ),
    ]
