"""A session signed in through the provider, asked about again once its interval is up: still
allowed, and with what (OIDC, `oidc.oidc_recheck`), or ended (SAML, which cannot ask without the
person; a refusal; a provider that cannot be reached). The person's access follows the answer
from that request on."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from identity.models import ExternalIdentity
from identity.oidc import oidc_recheck
from identity.services import identity_access_update, session_for_recheck, sign_in_session_end
from identity.sessions import recheck_seconds


def session_recheck(*, session_id: int, address: str | None) -> bool:
    """Re-check one session; True while it stays signed in. Holds the session's row FOR UPDATE
    across the provider's answer, so concurrent requests of one browser re-check it once (a
    rotated refresh token is used once); a request that finds it re-checked meanwhile answers
    at once."""
    with transaction.atomic():
        session = session_for_recheck(session_id)
        if session is None or session.ended_at is not None:
            return False
        provider = session.identity.provider
        interval = recheck_seconds(provider)
        if session.checked_at > timezone.now() - timedelta(seconds=interval / 2):
            return True  # re-checked by a concurrent request
        if provider == ExternalIdentity.Provider.SAML:
            reason: str | None = (
                "a SAML sign-in lasts CANON_SAML_RECHECK_MINUTES; sign in again to be re-checked"
            )
        else:
            answer = oidc_recheck(session)
            reason = answer.end_reason
            if reason is None and answer.claims is not None:
                reason = identity_access_update(
                    session=session, claims=answer.claims, tokens=answer.tokens
                )
        if reason is not None:
            sign_in_session_end(session=session, reason=reason, address=address)
            return False
        return True
