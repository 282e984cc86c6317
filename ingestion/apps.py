from django.apps import AppConfig
from django.utils.translation import gettext_lazy


class IngestionConfig(AppConfig):
    name = "ingestion"
    verbose_name = gettext_lazy("Ingestion")
