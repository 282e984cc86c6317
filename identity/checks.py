"""System checks of the sign-in configuration, at start and on `manage.py check`."""

from __future__ import annotations

import shutil
from typing import Any

from django.conf import settings
from django.core.checks import Error, Warning, register
from django.core.exceptions import ImproperlyConfigured

from identity.mapping import settings_rows


@register("identity")
def identity_configuration(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    problems: list[Any] = []
    try:
        settings_rows()
    except ImproperlyConfigured as exc:
        problems.append(Error(str(exc), id="identity.E001"))
    if settings.SAML_ENABLED and not shutil.which(settings.SAML_XMLSEC_BINARY):
        problems.append(
            Error(
                f"SAML sign-in needs the xmlsec1 binary; {settings.SAML_XMLSEC_BINARY} is not "
                "there (Debian: apt-get install xmlsec1; or set CANON_SAML_XMLSEC_BINARY).",
                id="identity.E002",
            )
        )
    if settings.OIDC_ENABLED and not settings.OIDC_CLIENT_SECRET:
        problems.append(
            Error(
                "CANON_OIDC_CLIENT_ID is set without CANON_OIDC_CLIENT_SECRET.", id="identity.E003"
            )
        )
    if settings.LOCAL_PASSWORDS == "superusers" and not (
        settings.OIDC_ENABLED or settings.SAML_ENABLED
    ):
        problems.append(
            Warning(
                "CANON_LOCAL_PASSWORDS=superusers with no identity provider configured: only "
                "superusers can sign in.",
                id="identity.W001",
            )
        )
    return problems
