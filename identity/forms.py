"""The admin's sign-in form: Django's, with failed sign-ins counted and rate limited
(`identity.throttle`) and every attempt on the audit trail."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError
from django.utils.translation import gettext, ngettext

from identity import audit
from identity.services import sign_in_refused
from identity.throttle import sign_in_failed, sign_in_locked, sign_in_succeeded


def locked_message(seconds: int) -> str:
    minutes = max(1, math.ceil(seconds / 60))
    return ngettext(
        "Too many failed sign-ins from your address; try again in %(n)s minute.",
        "Too many failed sign-ins from your address; try again in %(n)s minutes.",
        minutes,
    ) % {"n": minutes}


class AdminLoginForm(AdminAuthenticationForm):
    def clean(self) -> dict[str, Any]:
        address = audit.client_address(self.request)
        username = self.cleaned_data.get("username") or ""
        wait = sign_in_locked(address=address, username=username)
        if wait is not None:
            sign_in_refused(
                who=username, provider="password", address=address, reason="rate limited"
            )
            raise ValidationError(locked_message(wait), code="rate_limited")
        try:
            cleaned = super().clean()
        except ValidationError as error:
            sign_in_failed(address=address, username=username)
            reason = "wrong user name or password, or not staff"
            if settings.LOCAL_PASSWORDS == "superusers":
                reason += " (local passwords are for superusers only)"
                error = ValidationError(
                    [
                        *error.messages,
                        gettext(
                            "Local passwords are switched off here except for the break-glass "
                            "superuser: sign in with your company account above."
                        ),
                    ],
                    code="invalid_login",
                )
            sign_in_refused(who=username, provider="password", address=address, reason=reason)
            raise error from None
        sign_in_succeeded(address=address, username=username)
        user = self.get_user()
        audit.audit(
            audit.SIGN_IN,
            action=f"{user.get_username()} signed in with a local password",
            subject_id=user.pk,
            actor_id=user.pk,
            provider="password",
            address=address,
        )
        return cleaned
