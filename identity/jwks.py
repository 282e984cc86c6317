"""The provider's facts Canon reads over HTTP: its discovery document (cached an hour per
issuer) and its signing keys (PyJWT's PyJWKClient: the key set cached
CANON_OAUTH_JWKS_CACHE_SECONDS, fetched again for a key id it does not hold at most once per
CANON_OAUTH_JWKS_MIN_REFETCH_SECONDS), and the one JWT check every token goes through:
signature by a key of that set, an algorithm of the allow-list, issuer, audience, expiry.

So keys rotate without a restart: a token signed with a new key fetches the set again; a key the
provider dropped is gone from the set at the next fetch, and tokens signed with it are refused."""

from __future__ import annotations

import threading
import time
from collections.abc import Collection
from typing import Any

import httpx
import jwt
from django.conf import settings
from jwt import PyJWKClient
from jwt.exceptions import PyJWKClientConnectionError, PyJWKClientError

DISCOVERY_SECONDS = 3600


class ProviderUnreachable(Exception):
    """The provider did not answer (or answered nonsense): nothing about the person is known."""


class JwtRefused(Exception):
    """A JWT Canon does not accept; `reason` says why, for the audit trail (never the token)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_lock = threading.Lock()
_discovered: dict[str, tuple[float, dict[str, Any]]] = {}
_clients: dict[tuple[str, int, int], PyJWKClient] = {}


def openid_configuration(issuer: str) -> dict[str, Any]:
    """The issuer's discovery document (/.well-known/openid-configuration), cached an hour;
    its `issuer` must be the one asked for. Raises ProviderUnreachable."""
    now = time.monotonic()
    with _lock:
        cached = _discovered.get(issuer)
    if cached is not None and now - cached[0] < DISCOVERY_SECONDS:
        return cached[1]
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = httpx.get(url, timeout=settings.IDENTITY_HTTP_TIMEOUT_SECONDS)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ProviderUnreachable(
            f"the identity provider's discovery document could not be read ({type(exc).__name__})"
        ) from None
    if not isinstance(document, dict) or document.get("issuer") != issuer:
        raise ProviderUnreachable("the identity provider's discovery document names another issuer")
    with _lock:
        _discovered[issuer] = (now, document)
    return document


def jwks_client(jwks_url: str) -> PyJWKClient:
    """One PyJWKClient per key set URL and cache settings, shared by the process's threads."""
    key = (jwks_url, settings.OAUTH_JWKS_CACHE_SECONDS, settings.OAUTH_JWKS_MIN_REFETCH_SECONDS)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = PyJWKClient(
                jwks_url,
                cache_jwk_set=True,
                lifespan=max(1, settings.OAUTH_JWKS_CACHE_SECONDS),
                timeout=settings.IDENTITY_HTTP_TIMEOUT_SECONDS,
                cooldown_duration=max(0, settings.OAUTH_JWKS_MIN_REFETCH_SECONDS),
            )
    return client


def forget() -> None:
    """Drop every cached discovery document and key set (tests; a changed configuration)."""
    with _lock:
        _discovered.clear()
        _clients.clear()


def verified_claims(
    token: str,
    *,
    jwks_url: str,
    issuer: str,
    audience: str | Collection[str] | None,
    algorithms: Collection[str],
    leeway: float,
    require: Collection[str] = ("exp", "iat"),
) -> dict[str, Any]:
    """The claims of `token` once its signature, algorithm, issuer, audience and times are
    checked. Raises JwtRefused (the reason in words) or ProviderUnreachable (the key set could
    not be fetched)."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise JwtRefused("not a JWT") from None
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in algorithms:
        raise JwtRefused(f"algorithm {alg!r} is not allowed")
    kid = header.get("kid")
    client = jwks_client(jwks_url)
    try:
        if isinstance(kid, str) and kid:
            key = client.get_signing_key(kid)
        else:
            keys = client.get_signing_keys()
            if len(keys) != 1:
                raise JwtRefused("no key id, and the provider has several keys")
            key = keys[0]
    except PyJWKClientConnectionError:
        raise ProviderUnreachable("the identity provider's keys could not be fetched") from None
    except PyJWKClientError:
        raise JwtRefused(f"unknown key id {str(kid)[:64]!r}") from None
    try:
        return jwt.decode(
            token,
            key.key,
            algorithms=[alg],
            audience=audience,
            issuer=issuer,
            leeway=leeway,
            options={"require": [*require, "iss", *(["aud"] if audience else [])]},
        )
    except jwt.ExpiredSignatureError:
        raise JwtRefused("expired") from None
    except jwt.InvalidAudienceError:
        raise JwtRefused("wrong audience") from None
    except jwt.InvalidIssuerError:
        raise JwtRefused("wrong issuer") from None
    except jwt.InvalidSignatureError:
        raise JwtRefused("bad signature") from None
    except jwt.ImmatureSignatureError:
        raise JwtRefused("not valid yet") from None
    except jwt.MissingRequiredClaimError as exc:
        raise JwtRefused(f"no {exc.claim} claim") from None
    except jwt.PyJWTError as exc:
        raise JwtRefused(f"invalid ({type(exc).__name__})") from None
