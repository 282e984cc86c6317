from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Retrieval"

    def ready(self) -> None:
        from retrieval import schema  # noqa: F401  (registers the OpenAPI auth extension)
