"""Celery's configuration: the CELERY_* Django settings without their prefix, as plain values.

Celery looks its configuration up several times per published message; read through
`django.conf:settings` with a namespace, every lookup pays a key translation and Django's
settings proxy (a third of the relay's time in B5). Celery imports this module lazily, on its
first read of the configuration, so the environment (DATABASE_URL, REDIS_URL, ...) is final by
then even in processes that import `config` before setting it up (devstack, the benchmarks).
"""

from django.conf import settings as _settings

globals().update(
    {
        name.removeprefix("CELERY_").lower(): getattr(_settings, name)
        for name in dir(_settings)
        if name.startswith("CELERY_")
    }
)
