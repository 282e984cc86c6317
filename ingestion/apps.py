from django.apps import AppConfig


class IngestionConfig(AppConfig):
    name = "ingestion"
    verbose_name = "Ingestion"

    def ready(self) -> None:
        from django.conf import settings

        from config.celery import app

        # Celery looks its configuration up several times per published message; through
        # `django.conf:settings` each lookup pays a namespace translation and Django's settings
        # proxy (a third of the relay's time in B5). Once settings are final (here, not at
        # import: the environment may still be changing then), copy them in as plain values.
        app.conf.update(
            {
                name.removeprefix("CELERY_").lower(): getattr(settings, name)
                for name in dir(settings)
                if name.startswith("CELERY_")
            }
        )
