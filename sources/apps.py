from django.apps import AppConfig
from django.utils.translation import gettext_lazy


class SourcesConfig(AppConfig):
    name = "sources"
    # The app holds Sources and Sync runs: named "Sources" too, every page of a source read
    # "Sources › Sources" in its breadcrumbs.
    verbose_name = gettext_lazy("Syncing")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The task runner dispatches by kind; a sync task's runner lives here, a floor above it
        # (`ingestion.pipeline.run.TASK_RUNNERS`). Imported here: apps.py loads while the
        # registry fills, before models may be imported at module level.
        from ingestion.pipeline.run import TASK_RUNNERS
        from sources.sync import sync_execute
        from work.models import IngestionTask

        TASK_RUNNERS[IngestionTask.Kind.SYNC] = sync_execute
