from django.apps import AppConfig
from django.utils.translation import gettext_lazy


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = gettext_lazy("Retrieval")

    def ready(self) -> None:
        # Registration by import (the OpenAPI auth extension); apps.py is imported while the app
        # registry is still filling.
        from retrieval.api import schema  # noqa: F401
