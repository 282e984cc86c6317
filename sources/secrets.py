"""Sources' credentials, encrypted at rest with Fernet (AES-128-CBC + HMAC-SHA256) under
`settings.SOURCES_KEY` (comma-separated keys; the first encrypts, every one decrypts, so a key
can be rotated). The plaintext is only ever in memory while a run uses it: never in a form, an
API answer, a log line, an error or the audit trail."""

from __future__ import annotations

import json
from collections.abc import Mapping

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class SecretsUnavailable(Exception):
    """No key is configured, or the stored credentials were encrypted with a key not given."""


def _fernet() -> MultiFernet:
    keys = [key.strip() for key in settings.SOURCES_KEY.split(",") if key.strip()]
    if not keys:
        raise SecretsUnavailable(
            "No key to encrypt credentials with: set CANON_SOURCES_KEY (a Fernet key)."
        )
    try:
        return MultiFernet([Fernet(key) for key in keys])
    except ValueError:
        raise SecretsUnavailable("CANON_SOURCES_KEY is not a valid Fernet key.") from None


def credentials_encrypt(credentials: Mapping[str, str]) -> str:
    """The token stored in `Source.credentials_encrypted`; "" for no credentials."""
    kept = {name: value for name, value in credentials.items() if value}
    if not kept:
        return ""
    return _fernet().encrypt(json.dumps(kept, sort_keys=True).encode()).decode()


def credentials_decrypt(token: str) -> dict[str, str]:
    if not token:
        return {}
    try:
        return dict(json.loads(_fernet().decrypt(token.encode())))
    except InvalidToken:
        raise SecretsUnavailable(
            "The source's credentials were encrypted with a key that is not in "
            "CANON_SOURCES_KEY; enter them again."
        ) from None
