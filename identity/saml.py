"""SAML 2.0 sign-in to the admin with djangosaml2 (pysaml2, which signs and checks with the
xmlsec1 binary): this server is the service provider, its configuration built per request
(`sp_config`: the assertion consumer's URL as this request reaches it), the identity provider's
metadata read from CANON_SAML_IDP_METADATA (a URL, cached an hour, or a file). An assertion or
its response must be signed by the provider; unsolicited responses are refused.

The person's attributes are the claims the mapping reads (`services.identity_sign_in`), their
NameID the subject. SAML cannot re-check a session without the person, so a SAML session ends
after CANON_SAML_RECHECK_MINUTES (`recheck`); the provider's single logout (the browser sent
to /identity/saml/ls/) ends the session of that browser."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext
from djangosaml2.backends import Saml2Backend
from djangosaml2.views import AssertionConsumerServiceView, LoginView, LogoutView, MetadataView
from saml2 import BINDING_HTTP_POST, BINDING_HTTP_REDIRECT
from saml2.config import SPConfig

from identity import audit
from identity.forms import locked_message
from identity.models import ExternalIdentity
from identity.services import (
    ProviderIdentity,
    SignInRefused,
    identity_sign_in,
    sign_in_refused,
    sign_in_session_start,
)
from identity.sessions import session_mark
from identity.throttle import sign_in_failed, sign_in_locked

METADATA_SECONDS = 3600
_lock = threading.Lock()
_metadata: dict[str, tuple[float, str]] = {}


def idp_metadata() -> str:
    """The identity provider's metadata XML: fetched from a URL (cached an hour; the last good
    copy kept while it cannot be fetched) or read from a file."""
    source = settings.SAML_IDP_METADATA
    if not source.startswith(("https://", "http://")):
        try:
            return Path(source).read_text()
        except OSError as exc:
            raise ImproperlyConfigured(
                f"CANON_SAML_IDP_METADATA: the file cannot be read ({exc.strerror})"
            ) from None
    now = time.monotonic()
    with _lock:
        cached = _metadata.get(source)
    if cached is not None and now - cached[0] < METADATA_SECONDS:
        return cached[1]
    try:
        response = httpx.get(source, timeout=settings.IDENTITY_HTTP_TIMEOUT_SECONDS)
        response.raise_for_status()
        text = response.text
    except httpx.HTTPError:
        if cached is not None:
            return cached[1]
        raise ImproperlyConfigured(
            "CANON_SAML_IDP_METADATA: the identity provider's metadata could not be fetched"
        ) from None
    with _lock:
        _metadata[source] = (now, text)
    return text


def sp_config(request: HttpRequest | None = None) -> SPConfig:
    """djangosaml2's SAML_CONFIG_LOADER: pysaml2's service-provider configuration, its URLs as
    `request` reaches this server (behind the TLS proxy, https)."""
    base = request.build_absolute_uri("/").rstrip("/") if request is not None else ""
    signing = bool(settings.SAML_KEY_FILE and settings.SAML_CERT_FILE)
    conf: dict[str, Any] = {
        "entityid": settings.SAML_ENTITY_ID or base + reverse("identity-saml-metadata"),
        "xmlsec_binary": settings.SAML_XMLSEC_BINARY,
        "allow_unknown_attributes": True,
        "service": {
            "sp": {
                "name": "Canon",
                "endpoints": {
                    "assertion_consumer_service": [
                        (base + reverse("identity-saml-acs"), BINDING_HTTP_POST)
                    ],
                    "single_logout_service": [
                        (base + reverse("identity-saml-ls"), BINDING_HTTP_REDIRECT),
                        (base + reverse("identity-saml-ls-post"), BINDING_HTTP_POST),
                    ],
                },
                "allow_unsolicited": False,
                "authn_requests_signed": signing,
                "logout_requests_signed": signing,
                "want_assertions_signed": False,
                "want_response_signed": False,
                "want_assertions_or_response_signed": True,
            }
        },
        "metadata": {"inline": [idp_metadata()]},
    }
    if signing:
        conf.update(key_file=settings.SAML_KEY_FILE, cert_file=settings.SAML_CERT_FILE)
    config = SPConfig()
    config.load(conf)
    return config


def _first(attributes: dict[str, Any], name: str) -> str:
    values = attributes.get(name) or []
    value = values[0] if isinstance(values, list) and values else values
    return value if isinstance(value, str) else ""


class SamlBackend(Saml2Backend):
    """djangosaml2's backend, signing in Canon's user for the assertion's NameID
    (`identity_sign_in`); never a user found by name. Raises SignInRefused."""

    def authenticate(
        self,
        request: HttpRequest | None,
        session_info: dict[str, Any] | None = None,
        attribute_mapping: Any = None,
        create_unknown_user: bool = True,
        assertion_info: Any = None,
        **kwargs: Any,
    ) -> Any:
        if session_info is None or "ava" not in session_info:
            return None
        attributes = dict(session_info["ava"])
        name_id = session_info.get("name_id")
        subject = getattr(name_id, "text", None) or ""
        if not subject:
            raise SignInRefused(
                gettext("The identity provider did not say who you are; ask an administrator."),
                reason="the assertion has no NameID",
            )
        return identity_sign_in(
            who=ProviderIdentity(
                provider=ExternalIdentity.Provider.SAML,
                issuer=str(session_info.get("issuer", "")),
                subject=subject,
                username=_first(attributes, settings.SAML_USERNAME_ATTRIBUTE),
                email=_first(attributes, settings.SAML_EMAIL_ATTRIBUTE),
                first_name=_first(attributes, "givenName"),
                last_name=_first(attributes, "sn"),
                claims=attributes,
            ),
            address=audit.client_address(request),
        )


def _enabled_or_404() -> None:
    if not settings.SAML_ENABLED:
        raise Http404("SAML sign-in is not configured.")


def _locked(request: HttpRequest) -> HttpResponse | None:
    wait = sign_in_locked(address=audit.client_address(request))
    if wait is None:
        return None
    messages.error(request, locked_message(wait))
    return HttpResponseRedirect(reverse("admin:login"))


class SamlLoginView(LoginView):
    """Off to the identity provider with an AuthnRequest (djangosaml2's)."""

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        _enabled_or_404()
        return _locked(request) or super().get(request, *args, **kwargs)


class SamlAcsView(AssertionConsumerServiceView):
    """The provider's answer (djangosaml2 checks its signature, audience, times and that it
    answers a request of this browser); the person signed in as the mapping says. Every refusal
    is a message on the sign-in page, a failed sign-in counted and an audit event."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        _enabled_or_404()
        return _locked(request) or super().post(request, *args, **kwargs)

    def authenticate_user(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().authenticate_user(request, *args, **kwargs)
        except SignInRefused as refused:
            raise PermissionDenied(refused) from None

    def handle_acs_failure(
        self,
        request: HttpRequest,
        exception: Exception | None = None,
        status: int = 403,
        **kwargs: Any,
    ) -> HttpResponse:
        address = audit.client_address(request)
        sign_in_failed(address=address)
        refused = exception.args[0] if exception is not None and exception.args else None
        if isinstance(refused, SignInRefused):
            message = refused.message
            if not refused.audited:
                sign_in_refused(who="", provider="saml", address=address, reason=refused.reason)
        else:
            message = gettext(
                "The identity provider's answer could not be accepted; sign in again."
            )
            reason = f"SAML response refused ({type(exception).__name__})"
            sign_in_refused(who="", provider="saml", address=address, reason=reason)
        messages.error(request, message)
        return HttpResponseRedirect(reverse("admin:login"))

    def post_login_hook(
        self, request: HttpRequest, user: Any, session_info: dict[str, Any]
    ) -> None:
        if request.session.session_key is None:
            request.session.save()
        session = sign_in_session_start(
            user=user,
            session_key=str(request.session.session_key),
            provider_session=str(session_info.get("session_index") or ""),
            address=audit.client_address(request),
        )
        session_mark(request, session, ExternalIdentity.Provider.SAML)


class SamlMetadataView(MetadataView):
    """This service provider's metadata, for the identity provider's administrator."""

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        _enabled_or_404()
        return super().get(request, *args, **kwargs)


class SamlLogoutView(LogoutView):
    """The provider's single logout (a LogoutRequest through the browser): djangosaml2 signs
    this browser out."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        _enabled_or_404()
        return super().dispatch(request, *args, **kwargs)
