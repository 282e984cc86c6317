from django.apps import AppConfig
from django.utils.translation import gettext_lazy


class EvaluationConfig(AppConfig):
    name = "evaluation"
    verbose_name = gettext_lazy("Evaluation")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The task runner dispatches by kind; an evaluation run's and a calibration's runners
        # live here, floors above it (`ingestion.pipeline.run.TASK_RUNNERS`), as a sync's lives
        # in sources.apps.
        from evaluation.run import evaluation_execute
        from evaluation.services.calibration import calibration_execute
        from ingestion.pipeline.run import TASK_RUNNERS
        from work.models import IngestionTask

        TASK_RUNNERS[IngestionTask.Kind.EVALUATION] = evaluation_execute
        TASK_RUNNERS[IngestionTask.Kind.CALIBRATION] = calibration_execute

        # The swap service asks the quality gate, floors below it, through its registry.
        from evaluation.gate import quality_gate_check
        from kb.services.index_versions import SWAP_CHECKS

        if quality_gate_check not in SWAP_CHECKS:
            SWAP_CHECKS.append(quality_gate_check)
