"""The WSGI application that gunicorn serves (config/gunicorn.conf.py). Each gunicorn worker
imports this module itself (preload_app is off), so each loads its own embedding model here."""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

import embeddings
from textkit import analysis

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()


def _preload_models() -> None:
    """A web process loads CANON_PRELOAD_EMBEDDING_MODELS before it serves, so the first query
    does not wait for a model (and gunicorn's arbiter counts the load as part of the worker's
    start, within its timeout); Celery and manage.py commands never import this module."""
    if settings.PRELOAD_EMBEDDING_MODELS:
        embeddings.preload(settings.PRELOAD_EMBEDDING_MODELS)
        analysis.preload()


_preload_models()
