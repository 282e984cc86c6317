from django.db import migrations, models


class Migration(migrations.Migration):
    """API keys may manage sources (issue 28) only when given the flag; every existing key may
    not."""

    dependencies = [
        ("retrieval", "0003_idempotency_per_principal"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="can_manage_sources",
            field=models.BooleanField(
                default=False,
                help_text="May list, create, change and sync the sources of its knowledge bases "
                "and confirm their deletions (/api/v1/…/sources).",
            ),
        ),
    ]
