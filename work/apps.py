from django.apps import AppConfig
from django.utils.translation import gettext_lazy


class WorkConfig(AppConfig):
    """Installed so Django imports `work.models`; its models keep the `ingestion` label."""

    name = "work"
    verbose_name = gettext_lazy("Work")
