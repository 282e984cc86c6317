# A calibration is computed as leased work: the IngestionTask that computes it.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('evaluation', '0006_verbose_names'),
        ('ingestion', '0007_ingestiontask_kind_calibration'),
    ]

    operations = [
        migrations.AddField(
            model_name='calibration',
            name='task',
            field=models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='calibration', to='ingestion.ingestiontask'),
        ),
    ]
