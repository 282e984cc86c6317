"""Local passwords: Django's check, but with CANON_LOCAL_PASSWORDS=superusers only a superuser
(the break-glass account) may use one; everyone else signs in through the provider. Permissions
are Django's for every user, whichever way they signed in."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest


def local_passwords_for(user: Any) -> bool:
    return settings.LOCAL_PASSWORDS == "everyone" or bool(getattr(user, "is_superuser", False))


class LocalPasswordBackend(ModelBackend):
    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        user = super().authenticate(request, username=username, password=password, **kwargs)
        return user if user is not None and local_passwords_for(user) else None
