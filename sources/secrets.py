"""Sources' credentials, encrypted at rest with Fernet (AES-128-CBC + HMAC-SHA256) under
`settings.SOURCES_KEY` (comma-separated keys; the first encrypts, every one decrypts, so a key
can be rotated). The plaintext is only ever in memory while a run uses it: never in a form, an
API answer, a log line, an error or the audit trail."""

from __future__ import annotations

import json
from collections.abc import Mapping

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.utils.translation import gettext_noop

from textkit.reasons import ReasonedError, reason

NO_KEY = reason(
    "source.no_key",
    gettext_noop("No key to encrypt credentials with: set CANON_SOURCES_KEY (a Fernet key)."),
)
KEY_INVALID = reason(
    "source.key_invalid", gettext_noop("CANON_SOURCES_KEY is not a valid Fernet key.")
)
KEY_UNKNOWN = reason(
    "source.key_unknown",
    gettext_noop(
        "The source's credentials were encrypted with a key that is not in CANON_SOURCES_KEY; "
        "enter them again."
    ),
)


class SecretsUnavailable(ReasonedError):
    """No key is configured, or the stored credentials were encrypted with a key not given (a
    declared reason: the admin words it in the person's language)."""


def _fernet() -> MultiFernet:
    keys = [key.strip() for key in settings.SOURCES_KEY.split(",") if key.strip()]
    if not keys:
        raise SecretsUnavailable(NO_KEY())
    try:
        return MultiFernet([Fernet(key) for key in keys])
    except ValueError:
        raise SecretsUnavailable(KEY_INVALID()) from None


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
        raise SecretsUnavailable(KEY_UNKNOWN()) from None
