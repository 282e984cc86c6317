"""The sign-in page's buttons: one per identity provider configured."""

from __future__ import annotations

from typing import Any

from django import template
from django.conf import settings
from django.urls import reverse

register = template.Library()


@register.simple_tag
def sign_in_providers() -> dict[str, Any]:
    providers = []
    if settings.OIDC_ENABLED:
        providers.append({"name": settings.OIDC_NAME, "url": reverse("identity-oidc-start")})
    if settings.SAML_ENABLED:
        providers.append({"name": settings.SAML_NAME, "url": reverse("identity-saml-login")})
    return {"providers": providers, "local_passwords": settings.LOCAL_PASSWORDS}
