"""The sign-in page's buttons: one per identity provider configured."""

from __future__ import annotations

from typing import Any

from django import template
from django.conf import settings
from django.urls import reverse
from django.utils.translation import gettext

register = template.Library()


@register.simple_tag
def sign_in_providers() -> dict[str, Any]:
    """The buttons' names are the deployment's (CANON_OIDC_NAME, CANON_SAML_NAME), shown as
    written; unset, the page's words for "your company account"."""
    providers = []
    if settings.OIDC_ENABLED:
        providers.append(
            {
                "name": settings.OIDC_NAME or gettext("your company account"),
                "url": reverse("identity-oidc-start"),
            }
        )
    if settings.SAML_ENABLED:
        providers.append(
            {
                "name": settings.SAML_NAME or gettext("your company account (SAML)"),
                "url": reverse("identity-saml-login"),
            }
        )
    return {"providers": providers, "local_passwords": settings.LOCAL_PASSWORDS}
