"""The quality gate of a knowledge base, the revision target of a run (a pending revision's
build served instead of the live one), and runs started by the nightly schedule."""

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('evaluation', '0002_roles'),
        ('kb', '0021_visibility_statistics'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='QualityGate',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('metric', models.CharField(choices=[('hit@1', 'hit@1'), ('hit@5', 'hit@5'), ('hit@10', 'hit@10'), ('mrr@10', 'mrr@10'), ('ndcg@10', 'ndcg@10'), ('recall@5', 'recall@5'), ('recall@10', 'recall@10')], default='mrr@10', help_text='The figure compared, over all questions of the set.', max_length=16)),
                ('mode', models.CharField(choices=[('hybrid', 'hybrid'), ('keyword', 'keyword'), ('vector', 'vector')], default='hybrid', help_text='The search mode whose figure is compared.', max_length=8)),
                ('max_drop', models.FloatField(default=0.02, help_text="How much lower the candidate's figure may be than the active version's (0.02: MRR@10 0.700 may become 0.680, not 0.679).", validators=[django.core.validators.MinValueValidator(0.0), django.core.validators.MaxValueValidator(1.0)], verbose_name='largest drop allowed')),
                ('refuse_swaps', models.BooleanField(default=True, help_text='Unticked, the swap page shows the figures but refuses nothing.', verbose_name='refuse swaps')),
                ('nightly', models.BooleanField(default=False, help_text='Ask the set of the active version every night, and raise an anomaly on the consistency dashboard when the figure drops by more than allowed since the last run.', verbose_name='nightly run')),
                ('nightly_hour', models.PositiveSmallIntegerField(default=2, help_text="0-23, in the server's time zone.", validators=[django.core.validators.MaxValueValidator(23)], verbose_name='hour of the nightly run')),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'verbose_name': 'quality gate',
                'verbose_name_plural': 'quality gates',
                'permissions': [('override_quality_gate', 'Can swap in an index version the quality gate refuses, giving a reason')],
            },
        ),
        migrations.AddField(
            model_name='evaluationrun',
            name='scheduled',
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name='evaluationrun',
            name='served_build',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='kb.build'),
        ),
        migrations.AlterField(
            model_name='evaluationrun',
            name='target',
            field=models.CharField(choices=[('active', 'the active version'), ('candidate', 'another index version'), ('revision', 'a pending revision served instead')], default='active', max_length=16),
        ),
        migrations.AddConstraint(
            model_name='evaluationrun',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('target', 'revision'), ('served_build__isnull', False)), models.Q(models.Q(('target', 'revision'), _negated=True), ('served_build__isnull', True)), _connector='OR'), name='evaluation_run_revision_named'),
        ),
        migrations.AddField(
            model_name='qualitygate',
            name='kb',
            field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='quality_gate', to='kb.knowledgebase', verbose_name='knowledge base'),
        ),
        migrations.AddField(
            model_name='qualitygate',
            name='question_set',
            field=models.ForeignKey(help_text='The questions whose figures judge a swap.', on_delete=django.db.models.deletion.PROTECT, related_name='+', to='evaluation.questionset', verbose_name='question set'),
        ),
        migrations.AddField(
            model_name='qualitygate',
            name='updated_by',
            field=models.ForeignKey(blank=True, editable=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
    ]
