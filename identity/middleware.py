"""Every request of a browser signed in through the provider: past its re-check time, the
session is re-checked (`recheck.session_recheck`) before the view runs, and signed out when the
provider no longer vouches for the person, so the view already answers as to someone signed
out (the admin's sign-in page, the API's 401)."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext_lazy

from identity.audit import client_address
from identity.models import SignInSession
from identity.recheck import session_recheck
from identity.sessions import session_due, session_mark

SIGNED_OUT = gettext_lazy(
    "You were signed out: your identity provider no longer confirms your sign-in, or your "
    "access changed there. Sign in again."
)


class SessionRecheckMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        session_id = session_due(request) if hasattr(request, "session") else None
        if session_id is not None and request.user.is_authenticated:
            if session_recheck(session_id=session_id, address=client_address(request)):
                session = SignInSession.objects.select_related("identity").get(pk=session_id)
                session_mark(request, session, session.identity.provider)
            else:
                logout(request)
                messages.warning(request, str(SIGNED_OUT))
        return self.get_response(request)
