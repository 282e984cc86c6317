from django.apps import AppConfig


class CanonConfig(AppConfig):
    """The project's wiring as an app: its system checks (canon.E010, the connection budget)
    and its management commands (`canon_pool_check`)."""

    name = "config"
    label = "canon"
    verbose_name = "Canon"

    def ready(self) -> None:
        # Registration by import; apps.py is imported while the app registry is still filling.
        from config import checks  # noqa: F401
