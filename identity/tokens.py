"""OAuth 2.0 access tokens (JWT) from the company's provider, for services and agents: checked
(`jwks.verified_claims`: signature, algorithm allow-list, issuer, audience, expiry) and read
through the claim mapping into the grants an API key carries. `retrieval.principals` turns a
TokenGrant into the Principal every read is scoped by.

A token whose claims give nothing, or give more than one tenant, is refused like a bad one:
refusals all look alike to the caller (the answer of an unknown API key) and differ only on the
audit trail, where each says why."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import jwt
from django.conf import settings

from identity import audit
from identity.jwks import JwtRefused, ProviderUnreachable, openid_configuration, verified_claims
from identity.mapping import grants_of
from kb.roles import INDEX_ADMINS


class TokenRefused(Exception):
    """A token Canon does not accept; `reason` is for the audit trail only."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class TokenGrant:
    """What a token may do: an API key's grants (tenant, knowledge bases, access groups and
    abilities), and who it is (`ident`, for rate limits and idempotency records)."""

    ident: str
    tenant_id: int
    kb_ids: frozenset[int] | None
    access_groups: frozenset[str]
    can_read_history: bool
    can_upload: bool
    can_delete: bool
    can_manage_sources: bool


def tokens_enabled() -> bool:
    return bool(settings.OAUTH_TOKENS_ENABLED)


def looks_like_jwt(value: str) -> bool:
    """A compact JWS (three base64url parts); an API key (canon_<prefix>_<secret>) never is."""
    parts = value.split(".")
    return len(parts) == 3 and all(parts[:2]) and not value.startswith("canon_")


def _jwks_url() -> str:
    if settings.OAUTH_JWKS_URL:
        return str(settings.OAUTH_JWKS_URL)
    url = openid_configuration(settings.OAUTH_ISSUER).get("jwks_uri")
    if not isinstance(url, str) or not url:
        raise ProviderUnreachable("the identity provider's discovery document has no jwks_uri")
    return url


def _unverified(token: str) -> dict[str, Any]:
    """Who a refused token claimed to be, for the audit trail: never trusted, never the token."""
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return {}
    return {
        "claimed_issuer": str(claims.get("iss", ""))[:200],
        "claimed_subject": str(claims.get("sub", ""))[:200],
        "claimed_client": str(claims.get("client_id", claims.get("azp", "")))[:200],
        "kid": str(header.get("kid", ""))[:100],
        "alg": str(header.get("alg", ""))[:20],
    }


def token_grant(
    token: str, *, audience: str | None = None, address: str | None = None
) -> TokenGrant:
    """The grants of an access token, for the API (`audience` None: CANON_OAUTH_AUDIENCE) or
    the MCP server (its resource URL). Raises TokenRefused, recorded on the audit trail: bad
    signature, unknown key id, an algorithm not allowed (none), wrong issuer or audience,
    expired, claims mapping to nothing or to several tenants, the provider unreachable."""
    try:
        claims = verified_claims(
            token,
            jwks_url=_jwks_url(),
            issuer=settings.OAUTH_ISSUER,
            audience=audience or settings.OAUTH_AUDIENCE,
            algorithms=settings.OAUTH_ALGORITHMS,
            leeway=settings.OAUTH_LEEWAY_SECONDS,
            require=("exp",),
        )
        grants = grants_of(claims)
        if not grants.grants:
            raise JwtRefused("its claims map to nothing")
        if len(grants.tenant_ids) > 1:
            raise JwtRefused("its claims map to several tenants")
    except (JwtRefused, ProviderUnreachable) as exc:
        reason = exc.reason if isinstance(exc, JwtRefused) else str(exc)
        audit.token_refused(address=address, reason=reason, **_unverified(token))
        raise TokenRefused(reason) from None
    subject = f"{claims.get('iss')}|{claims.get('sub') or claims.get('client_id') or ''}"
    roles = grants.roles
    return TokenGrant(
        ident="token:" + hashlib.sha256(subject.encode()).hexdigest()[:40],
        tenant_id=next(iter(grants.tenant_ids)),
        kb_ids=grants.kb_ids,
        access_groups=grants.access_groups,
        can_read_history=bool(roles),
        can_upload=bool(roles),
        can_delete=bool(roles),
        can_manage_sources=INDEX_ADMINS in roles,
    )
