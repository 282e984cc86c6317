"""DRF authentication: `Authorization: Bearer <key>` (an API key, or an OAuth access token of the
company's identity provider when CANON_OAUTH_* is set) or an admin session."""

from __future__ import annotations

from typing import Any, cast

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from identity.audit import client_address
from retrieval.principals import (
    InvalidKey,
    Principal,
    principal_from_bearer,
    principal_from_user,
)


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Principal] | None:
        header = get_authorization_header(request).split()
        if not header:
            return None
        if header[0].lower() != b"bearer":
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <API key>'.")
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header.")
        try:
            principal = principal_from_bearer(
                header[1].decode("ascii"), address=client_address(request._request)
            )
        except (InvalidKey, UnicodeDecodeError) as exc:
            raise exceptions.AuthenticationFailed(f"Invalid API key: {exc}.") from exc
        return (None, principal)

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="canon"'


_UNRESOLVED = object()


def request_principal(request: Request) -> Principal | None:
    """The principal of an API-key request, or of an admin session user with a tenant
    (resolved once per request)."""
    if isinstance(request.auth, Principal):
        return request.auth
    cached = getattr(request, "_canon_principal", _UNRESOLVED)
    if cached is not _UNRESOLVED:
        return cast("Principal | None", cached)
    principal = principal_from_user(request.user) if request.user is not None else None
    request._canon_principal = principal  # type: ignore[attr-defined]
    return principal


class HasPrincipal(BasePermission):
    message = "Authentication credentials were not provided."

    def has_permission(self, request: Request, view: Any) -> bool:
        return request_principal(request) is not None
