"""Who is asking: API keys (hashed at rest), OAuth access tokens from the company's identity
provider (`identity.tokens`) and admin session users, reduced to a Principal that every read is
scoped by. Nothing a client sends can widen a principal."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection
from django.utils import timezone

from identity.tokens import TokenRefused, looks_like_jwt, token_grant, tokens_enabled
from kb import access
from kb.access import reader_of_user
from kb.models import KnowledgeBase, Tenant
from retrieval.models import ApiKey

KEY_PREFIX = "canon"
LAST_USED_PRECISION = timedelta(minutes=1)


@dataclass(frozen=True)
class Principal:
    tenant_id: int
    kb_ids: frozenset[int] | None  # None: every knowledge base of the tenant
    access_groups: frozenset[str]
    all_groups: bool = False  # tenant admins read every access group
    can_read_history: bool = False  # may search as of a past time
    can_upload: bool = True
    can_delete: bool = True
    can_manage_sources: bool = False  # sources' API: list, create, change, sync, confirm
    api_key_id: int | None = None
    user_id: int | None = None
    token_ident: str | None = None  # an access token's issuer and subject, hashed

    @property
    def ident(self) -> str:
        """Who this is, for what is kept per principal (rate-limit counters, idempotency
        records): `key:<id>` for an API key, `token:<hash>` for an access token's subject,
        `user:<id>` for an admin session user."""
        if self.api_key_id is not None:
            return f"key:{self.api_key_id}"
        return self.token_ident or f"user:{self.user_id}"

    def may_read_kb(self, kb_id: int) -> bool:
        return self.kb_ids is None or kb_id in self.kb_ids

    def may_read_groups(self, groups: Iterable[str]) -> bool:
        """The visibility rule's access-group clause, for one document's groups (the admin's
        too: `kb.access.may_read_groups`)."""
        return access.may_read_groups(
            groups=groups, access_groups=self.access_groups, all_groups=self.all_groups
        )


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    knowledge_bases: Iterable[KnowledgeBase] = (),
    access_groups: Iterable[str] = (),
    expires_at: datetime | None = None,
    can_read_history: bool = False,
    can_manage_sources: bool = False,
) -> tuple[ApiKey, str]:
    """Create a key; return the row and the plaintext, which is never stored or shown again."""
    prefix = secrets.token_hex(4)
    plaintext = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        tenant=tenant,
        name=name,
        prefix=prefix,
        key_hash=_hash(plaintext),
        access_groups=sorted(set(access_groups)),
        expires_at=expires_at,
        can_read_history=can_read_history,
        can_manage_sources=can_manage_sources,
    )
    key.knowledge_bases.set(list(knowledge_bases))
    return key, plaintext


class InvalidKey(Exception):
    pass


# One prepared statement per request (server-side binding prepares it on each pooled
# connection): the key and the knowledge bases it is limited to. Read on every request, never
# cached, so a revocation or an expiry counts from the next request.
_KEY_SQL = """
    SELECT k.id, k.tenant_id, k.key_hash, k.access_groups, k.can_read_history, k.revoked_at,
           k.expires_at, k.last_used_at, k.can_manage_sources,
           ARRAY(SELECT m.knowledgebase_id FROM retrieval_apikey_knowledge_bases m
                 WHERE m.apikey_id = k.id)
    FROM retrieval_apikey k
    WHERE k.prefix = %(prefix)s
"""
_TOUCH_SQL = "UPDATE retrieval_apikey SET last_used_at = now() WHERE id = %(id)s"


def principal_from_key(plaintext: str) -> Principal:
    """Resolve a presented key; raises InvalidKey for unknown, malformed, expired or revoked.
    One statement (`_KEY_SQL`), plus an UPDATE of `last_used_at` at most once a minute per key."""
    parts = plaintext.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not parts[1] or not parts[2]:
        raise InvalidKey("malformed API key")
    with connection.cursor() as cursor:
        cursor.execute(_KEY_SQL, {"prefix": parts[1]})
        row = cursor.fetchone()
        if row is None or not hmac.compare_digest(row[2], _hash(plaintext)):
            raise InvalidKey("unknown API key")
        (
            key_id,
            tenant_id,
            _,
            groups,
            history,
            revoked_at,
            expires_at,
            last_used_at,
            sources,
            kb_ids,
        ) = row
        if revoked_at is not None:
            raise InvalidKey("this API key was revoked")
        now = timezone.now()
        if expires_at is not None and expires_at <= now:
            raise InvalidKey("this API key has expired")
        # A write per request costs more than the search itself; a minute's precision is enough.
        if last_used_at is None or last_used_at < now - LAST_USED_PRECISION:
            cursor.execute(_TOUCH_SQL, {"id": key_id})
    return Principal(
        tenant_id=tenant_id,
        kb_ids=frozenset(kb_ids) or None,
        access_groups=frozenset(groups),
        can_read_history=history,
        can_manage_sources=sources,
        api_key_id=key_id,
    )


def principal_from_token(
    token: str, *, audience: str | None = None, address: str | None = None
) -> Principal:
    """Resolve an OAuth access token (a JWT of the company's provider) into the grants an API
    key would carry (`identity.tokens.token_grant`: its claims through the claim mapping).
    Raises InvalidKey with an unknown key's words, whatever the reason: the caller learns
    nothing about which check failed; the audit trail records why."""
    try:
        grant = token_grant(token, audience=audience, address=address)
    except TokenRefused:
        raise InvalidKey("unknown API key") from None
    return Principal(
        tenant_id=grant.tenant_id,
        kb_ids=grant.kb_ids,
        access_groups=grant.access_groups,
        can_read_history=grant.can_read_history,
        can_upload=grant.can_upload,
        can_delete=grant.can_delete,
        can_manage_sources=grant.can_manage_sources,
        token_ident=grant.ident,
    )


def principal_from_bearer(
    value: str, *, audience: str | None = None, address: str | None = None
) -> Principal:
    """A Bearer credential: an access token (a JWT) while CANON_OAUTH_* is set, else an API key,
    exactly as before. Raises InvalidKey."""
    if tokens_enabled() and looks_like_jwt(value):
        return principal_from_token(value, audience=audience, address=address)
    return principal_from_key(value)


def principal_from_user(user: AbstractBaseUser | AnonymousUser) -> Principal | None:
    """Admin session users act within their tenant. Superusers read every access group; staff
    may search history; uploads and deletes need the content managers' permissions."""
    reader = reader_of_user(user)  # the tenant and groups the admin uses too
    if reader is None:
        return None
    has_perm = getattr(user, "has_perm", lambda perm: False)
    return Principal(
        tenant_id=reader.tenant_id,
        kb_ids=None,
        access_groups=reader.access_groups,
        all_groups=reader.all_groups,
        can_read_history=bool(
            getattr(user, "is_superuser", False) or getattr(user, "is_staff", False)
        ),
        can_upload=has_perm("kb.add_document"),
        can_delete=has_perm("kb.soft_delete_document"),
        can_manage_sources=has_perm("sources.change_source"),
        user_id=user.pk,
    )


class KnowledgeBaseNotFound(Exception):
    """No such knowledge base for this principal (or it has no active index version)."""


class OutOfScope(Exception):
    """Does not exist, or belongs to a scope the principal may not see: never told apart."""
