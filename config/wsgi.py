import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()


def _preload_models() -> None:
    """The web process (runserver or a WSGI server) loads CANON_PRELOAD_EMBEDDING_MODELS before
    it serves, so the first query does not wait for a model; Celery and manage.py commands
    never import this module."""
    from django.conf import settings

    from ingestion import analysis, providers

    if settings.PRELOAD_EMBEDDING_MODELS:
        providers.preload(settings.PRELOAD_EMBEDDING_MODELS)
        analysis.preload()


_preload_models()
