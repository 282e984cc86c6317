from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Retrieval"

    def ready(self) -> None:
        from config import checks  # noqa: F401  (registers canon.E010, the connection budget)
        from retrieval import schema  # noqa: F401  (registers the OpenAPI auth extension)
