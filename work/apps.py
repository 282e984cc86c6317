from django.apps import AppConfig


class WorkConfig(AppConfig):
    """Installed so Django imports `work.models`; its models keep the `ingestion` label."""

    name = "work"
    verbose_name = "Work"
