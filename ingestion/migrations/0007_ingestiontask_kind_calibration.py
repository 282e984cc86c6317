# A fusion calibration is leased work too (evaluation.services.calibration): its task kind.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ingestion', '0006_alter_auditevent_options_alter_ingestiontask_options_and_more'),
    ]

    operations = [
        migrations.AlterField(
            model_name='ingestiontask',
            name='kind',
            field=models.CharField(choices=[('build', 'Build'), ('delete', 'Delete'), ('gc', 'Gc'), ('sync', 'Sync'), ('evaluation', 'Evaluation'), ('calibration', 'Calibration')], max_length=16, verbose_name='kind'),
        ),
    ]
