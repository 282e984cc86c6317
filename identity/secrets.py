"""Tokens kept to re-check a session (a provider's refresh and access tokens), encrypted at
rest with a key derived from SECRET_KEY: a database dump alone does not carry them, and a
changed SECRET_KEY (which ends every session anyway) leaves them unreadable, so a re-check
ends the session instead of using them."""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


def _fernet() -> Fernet:
    key = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"canon identity session tokens"
    ).derive(settings.SECRET_KEY.encode())
    return Fernet(base64.urlsafe_b64encode(key))


def seal(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode() if plaintext else ""


def unseal(sealed: str) -> str:
    """The plaintext, or "" when there is none or it cannot be read (another SECRET_KEY)."""
    if not sealed:
        return ""
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        return ""
