"""stage_result_by_input: a succeeded stage result found by its input alone, so a shared stage
(parse, chunk) of a new build reuses another task's result (`ingestion.pipeline.stages.stage_run`).

Built CONCURRENTLY (a non-atomic migration of its own), so ingestion goes on while it is built;
an interrupted build leaves an INVALID index to drop (DROP INDEX CONCURRENTLY
stage_result_by_input) before the migration runs again.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ingestion", "0001_initial"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="stageresult",
            index=models.Index(
                condition=models.Q(("status", "succeeded")),
                fields=["stage", "input_fingerprint", "pipeline_version"],
                name="stage_result_by_input",
            ),
        ),
    ]
