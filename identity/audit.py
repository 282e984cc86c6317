"""The sign-in side of the audit trail (work.AuditEvent): who, from where, what it gave or why
it was refused. Never a token, a password or a secret: a token refusal records who it claimed
to be (unverified), its key id and the reason.

Kinds: SIGN_IN (subject the user; details provider, subject, address, grants), SIGN_IN_REFUSED
(subject the user when known; details who, address, reason), SIGNED_OUT (a session the
provider or a re-check ended; reason), ACCESS_CHANGED (a re-check changed what the claims give;
before and after), MAPPING_CHANGED (a claim mapping row added, changed or deleted; actor the
admin; before and after), TOKEN_REFUSED (details address, reason, claimed issuer and subject,
kid; at most TOKEN_REFUSALS_PER_MINUTE rows per address, the rest logged)."""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

from work.models import AuditEvent

logger = logging.getLogger("canon.identity")

SIGN_IN = "sign_in"
SIGN_IN_REFUSED = "sign_in_refused"
SIGNED_OUT = "signed_out"
ACCESS_CHANGED = "access_changed"
MAPPING_CHANGED = "claim_mapping_changed"
TOKEN_REFUSED = "token_refused"  # noqa: S105 (an audit kind)
KINDS = (SIGN_IN, SIGN_IN_REFUSED, SIGNED_OUT, ACCESS_CHANGED, MAPPING_CHANGED, TOKEN_REFUSED)
TOKEN_REFUSALS_PER_MINUTE = 30


def client_address(request: HttpRequest | None) -> str | None:
    """Where a request came from: REMOTE_ADDR, or behind the TLS proxy (BEHIND_TLS_PROXY) the
    address that proxy appended to X-Forwarded-For. None when it is not an IP address."""
    if request is None:
        return None
    address = request.META.get("REMOTE_ADDR", "")
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if getattr(settings, "SECURE_PROXY_SSL_HEADER", None) and forwarded:
        address = forwarded.split(",")[-1].strip()
    return checked_address(address)


def checked_address(address: str | None) -> str | None:
    try:
        return str(ipaddress.ip_address((address or "").strip()))
    except ValueError:
        return None


def audit(
    kind: str,
    *,
    action: str,
    subject_type: str = "user",
    subject_id: int | None = None,
    actor_id: int | None = None,
    **details: Any,
) -> None:
    """One audit event, written in the caller's transaction (or alone), and logged."""
    AuditEvent.objects.create(
        kind=kind,
        subject_type=subject_type,
        subject_id=subject_id,
        action=action,
        actor_id=actor_id,
        details=details,
    )
    logger.info("%s %s", kind, action, extra={"audit_kind": kind, **_log_fields(details)})


def token_refused(*, address: str | None, reason: str, **claimed: Any) -> None:
    """A refused token on the audit trail, at most TOKEN_REFUSALS_PER_MINUTE rows per address a
    minute (a flood of bad tokens must not flood the trail); every refusal is logged."""
    key = f"identity:token-refusals:{address or '-'}"
    try:
        cache.add(key, 0, timeout=60)
        count = cache.incr(key)
    except Exception:  # the cache is down: write the row (the trail matters more)
        count = 1
    details = {"address": address, "reason": reason, **claimed}
    if count <= TOKEN_REFUSALS_PER_MINUTE:
        audit(TOKEN_REFUSED, subject_type="token", action=f"token refused: {reason}", **details)
    else:
        logger.info("token refused: %s", reason, extra=_log_fields(details))


def _log_fields(details: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in details.items() if isinstance(v, str | int | float | None)}
