"""What a browser's Django session carries about its sign-in through the provider: which
SignInSession it is and when it is next re-checked (a time, so a request before it costs no
query)."""

from __future__ import annotations

import time

from django.conf import settings
from django.http import HttpRequest

from identity.models import ExternalIdentity, SignInSession

SESSION_ID = "canon.identity.session"
RECHECK_AT = "canon.identity.recheck_at"


def recheck_seconds(provider: str) -> float:
    minutes = (
        settings.SAML_RECHECK_MINUTES
        if provider == ExternalIdentity.Provider.SAML
        else settings.IDENTITY_RECHECK_MINUTES
    )
    return max(0.0, float(minutes) * 60)


def session_mark(request: HttpRequest, session: SignInSession, provider: str) -> None:
    """After a sign-in or a re-check: this browser session is `session`, next re-checked one
    interval from now."""
    request.session[SESSION_ID] = session.pk
    request.session[RECHECK_AT] = time.time() + recheck_seconds(provider)


def session_due(request: HttpRequest) -> int | None:
    """The SignInSession to re-check now, or None (no provider sign-in, or not due yet)."""
    session_id = request.session.get(SESSION_ID)
    if not isinstance(session_id, int):
        return None
    if time.time() < float(request.session.get(RECHECK_AT, 0)):
        return None
    return session_id
