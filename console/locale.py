"""The admin's language: the person's choice (Django's language cookie, set by the switcher in the
admin's header through `set_language`), else their browser's Accept-Language, else English.

Only the admin's pages are translated. Every other path, the APIs above all, answers in
LANGUAGE_CODE whatever the client asks for: machines read their error messages and codes, and a
message from a service shared with the admin stays English there."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.middleware.locale import LocaleMiddleware
from django.urls import get_script_prefix, reverse
from django.utils import translation

# The paths whose pages people read: the admin, the language switcher's own view, and the
# identity provider's sign-in steps a browser passes through (their refusals are messages the
# sign-in page shows, written in the language of the request that wrote them). The provider's
# machine doors (OIDC back-channel logout, SAML metadata) stay in English.
TRANSLATED_PATHS: tuple[Callable[[], str], ...] = (
    lambda: reverse("admin:index"),
    lambda: reverse("set_language"),
    lambda: reverse("identity-oidc-start"),
    lambda: reverse("identity-oidc-callback"),
    lambda: reverse("identity-saml-login"),
    lambda: reverse("identity-saml-acs"),
    lambda: reverse("identity-saml-ls"),
)


class AdminLocaleMiddleware(LocaleMiddleware):
    """Django's LocaleMiddleware under the admin; LANGUAGE_CODE, and no Vary on
    Accept-Language, everywhere else."""

    def process_request(self, request: HttpRequest) -> None:
        if translated(request.path):
            super().process_request(request)
            return
        translation.activate(settings.LANGUAGE_CODE)
        request.LANGUAGE_CODE = translation.get_language()

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        if translated(request.path):
            return super().process_response(request, response)
        return response


def translated(path: str) -> bool:
    """Whether `path` (with the script's prefix, as `reverse` gives it) is a page people read."""
    return path.startswith(_prefixes(get_script_prefix()))


@lru_cache(maxsize=16)
def _prefixes(script_prefix: str) -> tuple[str, ...]:
    # Resolved once per script prefix: every API request asks, and `reverse` costs ~40 µs.
    return tuple(prefix() for prefix in TRANSLATED_PATHS)
