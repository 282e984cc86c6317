from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Retrieval"

    def ready(self) -> None:
        # Registration by import (the OpenAPI auth extension); apps.py is imported while the app
        # registry is still filling.
        from retrieval.api import schema  # noqa: F401
