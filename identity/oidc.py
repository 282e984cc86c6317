"""OIDC sign-in to the admin with mozilla-django-oidc: the authorisation code flow with PKCE
(S256) and a nonce, its endpoints read from the issuer's discovery document, the ID token
checked by `jwks.verified_claims` (signature by the provider's keys, algorithm allow-list,
issuer, audience: this client, expiry, nonce), claims from the ID token and userinfo applied by
`services.identity_sign_in`. Its refusals are the person's to read on the sign-in page and the
audit trail's to keep; they count as failed sign-ins (`throttle`).

Also here: the re-check of a session (`oidc_recheck`: the refresh token, else the access token,
at userinfo) and OIDC Back-Channel Logout 1.0 (`BackchannelLogoutView`: the provider ends a
session, Canon deletes it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.translation import gettext, gettext_lazy
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from identity import audit
from identity.forms import locked_message
from identity.jwks import JwtRefused, ProviderUnreachable, openid_configuration, verified_claims
from identity.models import ExternalIdentity, SignInSession
from identity.secrets import unseal
from identity.services import (
    ProviderIdentity,
    SignInRefused,
    identity_sign_in,
    provider_logout,
    sign_in_refused,
    sign_in_session_start,
)
from identity.sessions import session_mark
from identity.throttle import sign_in_failed, sign_in_locked

logger = logging.getLogger("canon.identity")

BACKCHANNEL_LOGOUT_EVENT = "http://schemas.openid.net/event/backchannel-logout"
CALLBACK = "identity-oidc-callback"
UNREACHABLE = gettext_lazy("Canon could not reach the identity provider; try again in a moment.")


def _discovered(name: str) -> str:
    value = openid_configuration(settings.OIDC_ISSUER).get(name)
    if not isinstance(value, str) or not value:
        raise ProviderUnreachable(f"the identity provider's discovery document has no {name}")
    return value


def _basic_auth() -> bool:
    """client_secret_basic (OIDC's default) unless the provider only takes client_secret_post."""
    methods = openid_configuration(settings.OIDC_ISSUER).get(
        "token_endpoint_auth_methods_supported", ["client_secret_basic"]
    )
    return "client_secret_basic" in methods or "client_secret_post" not in methods


def mozilla_setting(name: str, *default: Any) -> Any:
    """mozilla-django-oidc's settings, from Canon's (CANON_OIDC_*) and the discovery document,
    so that Canon has one set of names and a provider is one issuer URL."""
    fixed = {
        "OIDC_RP_CLIENT_ID": settings.OIDC_CLIENT_ID,
        "OIDC_RP_CLIENT_SECRET": settings.OIDC_CLIENT_SECRET,
        "OIDC_RP_SCOPES": settings.OIDC_SCOPES,
        "OIDC_RP_SIGN_ALGO": "RS256",
        "OIDC_USE_PKCE": True,
        "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
        "OIDC_USE_NONCE": True,
        "OIDC_AUTHENTICATION_CALLBACK_URL": CALLBACK,
        "OIDC_TIMEOUT": settings.IDENTITY_HTTP_TIMEOUT_SECONDS,
        "OIDC_CREATE_USER": True,
        "LOGIN_REDIRECT_URL": "/admin/",
        "LOGIN_REDIRECT_URL_FAILURE": "/admin/login/",
    }
    if name in fixed:
        return fixed[name]
    endpoints = {
        "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
        "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
        "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
        "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
    }
    if name in endpoints:
        return _discovered(endpoints[name])
    if name == "OIDC_TOKEN_USE_BASIC_AUTH":
        return _basic_auth()
    return import_from_settings(name, *default)


def _login_page(request: HttpRequest) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("admin:login"))


@dataclass(frozen=True)
class SessionFacts:
    """What the callback's sign-in leaves for the session it starts after auth.login."""

    provider_session: str
    refresh_token: str
    access_token: str
    access_expires_at: datetime | None


FACTS_ATTR = "_canon_oidc_sign_in"


def _expires_at(token_info: dict[str, Any]) -> datetime | None:
    seconds = token_info.get("expires_in")
    if isinstance(seconds, int | float) and seconds > 0:
        return timezone.now() + timedelta(seconds=float(seconds))
    return None


class OidcBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend: its endpoints from discovery (read only when a callback is
    being answered, so a password sign-in never waits on the provider), Canon's ID-token check,
    Canon's user (`identity_sign_in`), and the tokens kept for re-checks."""

    get_settings = staticmethod(mozilla_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = "RS256"
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.token_info: dict[str, Any] = {}

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:
        return _discovered("token_endpoint")

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:
        return _discovered("userinfo_endpoint")

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:
        return _discovered("jwks_uri")

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        if request is None or "nonce" not in kwargs:  # not the OIDC callback
            return None
        try:
            return super().authenticate(request, **kwargs)
        except SignInRefused:
            raise
        except ProviderUnreachable as exc:
            raise SignInRefused(str(UNREACHABLE), reason=str(exc)) from None
        except JwtRefused as exc:
            raise SignInRefused(
                gettext("The identity provider's answer could not be verified; sign in again."),
                reason=f"ID token refused: {exc.reason}",
            ) from None
        except (requests.RequestException, SuspiciousOperation, ValueError, KeyError) as exc:
            raise SignInRefused(
                gettext("The identity provider did not complete the sign-in; sign in again."),
                reason=f"token exchange failed ({type(exc).__name__})",
            ) from None

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        claims = verified_claims(
            token,
            jwks_url=self.OIDC_OP_JWKS_ENDPOINT,
            issuer=settings.OIDC_ISSUER,
            audience=settings.OIDC_CLIENT_ID,
            algorithms=settings.OAUTH_ALGORITHMS,
            leeway=settings.OAUTH_LEEWAY_SECONDS,
        )
        if "nonce" in kwargs and claims.get("nonce") != kwargs["nonce"]:
            raise JwtRefused("the nonce does not match this sign-in")
        return claims

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.token_info = dict(super().get_token(payload))
        return self.token_info

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload.get("sub"):
            raise JwtRefused("userinfo answered for another subject")
        claims = {**payload, **userinfo}
        user = identity_sign_in(
            who=_provider_identity(str(payload["sub"]), claims),
            address=audit.client_address(self.request),
        )
        setattr(
            self.request,
            FACTS_ATTR,
            SessionFacts(
                provider_session=str(payload.get("sid") or ""),
                refresh_token=str(self.token_info.get("refresh_token") or ""),
                access_token=access_token or "",
                access_expires_at=_expires_at(self.token_info),
            ),
        )
        return user


def _provider_identity(subject: str, claims: dict[str, Any]) -> ProviderIdentity:
    def text(name: str) -> str:
        value = claims.get(name)
        return value if isinstance(value, str) else ""

    return ProviderIdentity(
        provider=ExternalIdentity.Provider.OIDC,
        issuer=settings.OIDC_ISSUER,
        subject=subject,
        username=text(settings.OIDC_USERNAME_CLAIM),
        email=text(settings.OIDC_EMAIL_CLAIM),
        first_name=text("given_name"),
        last_name=text("family_name"),
        claims=claims,
    )


def _refuse_locked(request: HttpRequest) -> HttpResponseRedirect | None:
    wait = sign_in_locked(address=audit.client_address(request))
    if wait is None:
        return None
    messages.error(request, locked_message(wait))
    return _login_page(request)


class OidcStartView(OIDCAuthenticationRequestView):
    """Off to the provider: the authorisation request with state, nonce and a PKCE challenge
    (S256), whose verifier waits in the session for the callback."""

    get_settings = staticmethod(mozilla_setting)

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)  # the endpoint is read when a request asks for it

    @property
    def OIDC_OP_AUTH_ENDPOINT(self) -> str:
        return _discovered("authorization_endpoint")

    @property
    def OIDC_RP_CLIENT_ID(self) -> str:
        return str(settings.OIDC_CLIENT_ID)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404("OIDC sign-in is not configured.")
        locked = _refuse_locked(request)
        if locked is not None:
            return locked
        try:
            return super().get(request)
        except ProviderUnreachable as exc:
            logger.warning("OIDC sign-in could not start: %s", exc)
            messages.error(request, str(UNREACHABLE))
            return _login_page(request)


class OidcCallbackView(OIDCAuthenticationCallbackView):
    """Back from the provider: the code exchanged (with the PKCE verifier), the person signed
    in as the mapping says, their session recorded for re-checks. Every refusal is a message on
    the sign-in page, a failed sign-in counted, and an audit event."""

    get_settings = staticmethod(mozilla_setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404("OIDC sign-in is not configured.")
        locked = _refuse_locked(request)
        if locked is not None:
            return locked
        if request.GET.get("error"):
            error = request.GET.get("error", "")[:100]
            self._refused(
                gettext("The identity provider did not sign you in (%(error)s).")
                % {"error": error},
                reason=f"the provider answered {error}",
            )
            super().get(request)  # forgets the state
            return _login_page(request)
        try:
            return super().get(request)
        except SignInRefused as refused:
            self._refused(refused.message, reason=refused.reason, audited=refused.audited)
        except SuspiciousOperation:
            self._refused(
                gettext(
                    "This sign-in answer does not belong to a sign-in started here, or was used "
                    "already; sign in again."
                ),
                reason="unknown or reused state",
            )
        return _login_page(request)

    def _refused(self, message: str, *, reason: str, audited: bool = False) -> None:
        address = audit.client_address(self.request)
        sign_in_failed(address=address)
        if not audited:
            sign_in_refused(who="", provider="oidc", address=address, reason=reason)
        messages.error(self.request, message)

    def login_failure(self) -> HttpResponse:
        self._refused(
            gettext(
                "The sign-in did not complete (your browser may have lost its session); sign in "
                "again."
            ),
            reason="the callback found no sign-in to complete",
        )
        return _login_page(self.request)

    def login_success(self) -> HttpResponse:
        response = super().login_success()  # auth.login: the session has its new key now
        facts: SessionFacts | None = getattr(self.request, FACTS_ATTR, None)
        if facts is not None:
            if self.request.session.session_key is None:
                self.request.session.save()
            session = sign_in_session_start(
                user=self.user,
                session_key=str(self.request.session.session_key),
                provider_session=facts.provider_session,
                address=audit.client_address(self.request),
                refresh_token=facts.refresh_token,
                access_token=facts.access_token,
                access_expires_at=facts.access_expires_at,
            )
            session_mark(self.request, session, ExternalIdentity.Provider.OIDC)
        return response


@method_decorator(csrf_exempt, name="dispatch")
class BackchannelLogoutView(View):
    """OIDC Back-Channel Logout 1.0: the provider POSTs a logout token (a JWT it signed, for
    this client, naming a subject, a session or both); Canon ends the matching sessions. 200
    once done (again: idempotent), 400 for a token it does not accept."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404("OIDC sign-in is not configured.")
        address = audit.client_address(request)
        token = request.POST.get("logout_token", "")
        try:
            claims = verified_claims(
                token,
                jwks_url=_discovered("jwks_uri"),
                issuer=settings.OIDC_ISSUER,
                audience=settings.OIDC_CLIENT_ID,
                algorithms=settings.OAUTH_ALGORITHMS,
                leeway=settings.OAUTH_LEEWAY_SECONDS,
                require=("iat", "jti"),
            )
            events = claims.get("events")
            if not isinstance(events, dict) or BACKCHANNEL_LOGOUT_EVENT not in events:
                raise JwtRefused("not a logout token (no back-channel logout event)")
            if "nonce" in claims:
                raise JwtRefused("a logout token carries no nonce")
            subject, sid = claims.get("sub"), claims.get("sid")
            if not subject and not sid:
                raise JwtRefused("the logout token names neither a subject nor a session")
        except (JwtRefused, ProviderUnreachable) as exc:
            reason = exc.reason if isinstance(exc, JwtRefused) else str(exc)
            audit.token_refused(address=address, reason=f"back-channel logout: {reason}")
            return JsonResponse(
                {"error": "invalid_request", "error_description": reason},
                status=400,
                headers={"Cache-Control": "no-store"},
            )
        ended = provider_logout(
            provider=ExternalIdentity.Provider.OIDC,
            issuer=settings.OIDC_ISSUER,
            subject=str(subject) if subject else None,
            provider_session=str(sid) if sid else None,
        )
        logger.info("back-channel logout ended %d session(s)", ended)
        return HttpResponse(status=200, headers={"Cache-Control": "no-store"})


@dataclass(frozen=True)
class Recheck:
    """A re-check's answer: the person's claims now and the tokens to keep, or why the session
    must end."""

    claims: dict[str, Any] | None = None
    tokens: dict[str, Any] | None = None
    end_reason: str | None = None


REFUSED = (
    "the identity provider no longer accepts this sign-in (the account was disabled or signed "
    "out there, or its access was revoked)"
)


def oidc_recheck(session: SignInSession) -> Recheck:
    """Ask the provider about a session's person again: its refresh token for new tokens (the
    provider refuses it for a disabled account or an ended session), else its access token while
    valid; then userinfo for the claims now. A provider that cannot be reached ends the session
    (it fails closed: access nobody can re-check is not kept)."""
    try:
        config = openid_configuration(settings.OIDC_ISSUER)
        token_endpoint, userinfo_endpoint = config["token_endpoint"], config["userinfo_endpoint"]
    except (ProviderUnreachable, KeyError):
        return Recheck(end_reason="the identity provider could not be reached to re-check")
    timeout = settings.IDENTITY_HTTP_TIMEOUT_SECONDS
    refresh, access = unseal(session.refresh_token), unseal(session.access_token)
    tokens: dict[str, Any] = {}
    id_claims: dict[str, Any] = {}
    try:
        if refresh:
            data = {"grant_type": "refresh_token", "refresh_token": refresh}
            auth = None
            if _basic_auth():
                auth = (settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET)
            else:
                data.update(
                    client_id=settings.OIDC_CLIENT_ID, client_secret=settings.OIDC_CLIENT_SECRET
                )
            answer = httpx.post(token_endpoint, data=data, auth=auth, timeout=timeout)
            if answer.status_code in (400, 401):
                return Recheck(end_reason=REFUSED)
            answer.raise_for_status()
            body = answer.json()
            access = body["access_token"]
            tokens = {
                "access_token": access,
                "refresh_token": body.get("refresh_token") or refresh,
                "access_expires_at": _expires_at(body),
            }
            if body.get("id_token"):
                id_claims = OidcBackend().verify_token(body["id_token"])
        elif not access or (
            session.access_expires_at is not None and session.access_expires_at <= timezone.now()
        ):
            return Recheck(
                end_reason="the sign-in cannot be re-checked (the provider gave no refresh "
                "token and the access token expired)"
            )
        answer = httpx.get(
            userinfo_endpoint, headers={"Authorization": f"Bearer {access}"}, timeout=timeout
        )
        if answer.status_code in (401, 403):
            return Recheck(end_reason=REFUSED)
        answer.raise_for_status()
        userinfo = answer.json()
    except JwtRefused as exc:
        return Recheck(end_reason=f"the provider's renewed ID token was refused: {exc.reason}")
    except (httpx.HTTPError, ValueError, KeyError, ProviderUnreachable, ImproperlyConfigured):
        return Recheck(end_reason="the identity provider could not be reached to re-check")
    if not isinstance(userinfo, dict) or userinfo.get("sub") != session.identity.subject:
        return Recheck(end_reason="the identity provider answered for another subject")
    return Recheck(claims={**id_claims, **userinfo}, tokens=tokens)
