"""What the compatibility endpoints share: Bearer-key authentication that tells a malformed
header from a refused key, the fusion their searches use (each door hands the search request
core, `retrieval.api.search_request`, a REST search body it builds), where an invalid request's
problem is in the caller's words, and the facts about each hit's document that the REST hit does
not carry.

Both shapes promise a relevance score from 0 to 1 and a threshold on it (Dify's
`score_threshold`, OpenAI's `ranking_options.score_threshold`): their searches are hybrid and
fused by the learned fusion (`FUSION`), whose score is that, whatever CANON_HYBRID_FUSION says
for the REST API (with `rrf` every score would sit below 2/61 and a threshold of 0.5 would keep
nothing; with `convex` a score is relative to the best hit, not to the query)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from drf_spectacular.openapi import AutoSchema
from rest_framework.authentication import get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from identity.audit import client_address
from kb.models import Build
from retrieval.api.auth import ApiKeyAuthentication
from retrieval.api.search_request import SearchFailure
from retrieval.principals import InvalidKey, Principal, principal_from_bearer
from retrieval.search.hits import Hit

FUSION = "learned"


class MalformedAuthorization(AuthenticationFailed):
    """An Authorization header that is not `Bearer <key>`."""

    default_detail = "Invalid Authorization header format. Expected 'Bearer <api-key>' format."
    default_code = "malformed_authorization"


class KeyRefused(AuthenticationFailed):
    """A key that is unknown, expired or revoked."""

    default_detail = "Authorization failed: the API key is unknown, expired or revoked."
    default_code = "key_refused"


class BearerKeyAuthentication(ApiKeyAuthentication):
    """The API's `Authorization: Bearer <API key or access token>`, its two refusals told apart
    (a Dify caller gets a code for each; a refused token gets a refused key's), and alone: no
    admin session, these doors serve other programs. No header leaves the request
    unauthenticated (the view's permission refuses it)."""

    def authenticate(self, request: Request) -> tuple[Any, Principal] | None:
        header = get_authorization_header(request).split()
        if not header:
            return None
        if header[0].lower() != b"bearer" or len(header) != 2:
            raise MalformedAuthorization()
        try:
            principal = principal_from_bearer(
                header[1].decode("ascii"), address=client_address(request._request)
            )
        except (InvalidKey, UnicodeDecodeError) as exc:
            raise KeyRefused() from exc
        return (None, principal)


class CompatSchema(AutoSchema):
    """The views' OpenAPI: their key is the API's `ApiKey` scheme (BearerKeyAuthentication is
    ApiKeyAuthentication with its refusals told apart; one scheme, not two of one name)."""

    def get_auth(self) -> list[dict[str, list[str]]]:
        return [{"ApiKey": []}]


def caller_place(failure: SearchFailure, names: Mapping[str, str]) -> str | None:
    """Where an INVALID failure's problem is, in the caller's words: a REST body field under the
    caller's name for it (`names`: REST field -> the caller's), a place in the door's own shape
    (its filters, as `from_dify` and `from_openai` name them) as it is; None for the whole."""
    if failure.place is None:
        return None
    head = failure.place.split(".")[0].split("[")[0]
    return names.get(head, failure.place)


@dataclass(frozen=True)
class DocumentFacts:
    """What a hit's answer in another shape needs beyond the hit: the name of the file its
    revision was uploaded as (empty when none was given) and the document's metadata."""

    original_name: str
    metadata: dict[str, Any]


def document_facts(hits: Iterable[Hit]) -> dict[int, DocumentFacts]:
    """By build id, for these hits (which the principal may read: they are its search's
    answer), in one query on the primary."""
    build_ids = {hit.build_id for hit in hits}
    if not build_ids:
        return {}
    rows = Build.objects.filter(pk__in=build_ids).values_list(
        "pk", "revision__original_name", "document__metadata"
    )
    return {
        pk: DocumentFacts(original_name=name or "", metadata=dict(metadata or {}))
        for pk, name, metadata in rows
    }
