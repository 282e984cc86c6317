# An evaluation run is leased work too (evaluation.run): its task kind.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ingestion', '0004_alter_ingestiontask_kind'),
    ]

    operations = [
        migrations.AlterField(
            model_name='ingestiontask',
            name='kind',
            field=models.CharField(choices=[('build', 'Build'), ('delete', 'Delete'), ('gc', 'Gc'), ('sync', 'Sync'), ('evaluation', 'Evaluation')], max_length=16),
        ),
    ]
