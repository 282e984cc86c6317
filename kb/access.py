"""Who may read what: one rule for the admin and the API. A reader is a tenant and the access
groups held (or all of them); a document with no groups is the whole tenant's."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Q
from django.utils.translation import gettext

from kb.models import (
    TenantMembership,
)


@dataclass(frozen=True)
class Reader:
    """A session user's view: their tenant and the access groups they hold (`all_groups`: every
    group, for superusers). `retrieval.principals.principal_from_user` builds the API's
    principal from it, and the admin scopes its pages by it, so the two never disagree."""

    tenant_id: int
    access_groups: frozenset[str]
    all_groups: bool = False


def reader_of_user(user: Any) -> Reader | None:
    """The tenant and access groups of an authenticated user (their TenantMembership); None
    without one. Superusers read every access group."""
    if user is None or not user.is_authenticated:
        return None
    membership = TenantMembership.objects.filter(user_id=user.pk).first()
    if membership is None:
        return None
    return Reader(
        tenant_id=membership.tenant_id,
        access_groups=frozenset(membership.access_groups),
        all_groups=bool(getattr(user, "is_superuser", False)),
    )


def may_read_groups(
    *, groups: Iterable[str], access_groups: Collection[str], all_groups: bool
) -> bool:
    """The access-group rule for one document: readable when the caller reads every group, the
    document has none, or the caller holds at least one of them."""
    groups = set(groups)
    return all_groups or not groups or bool(groups & set(access_groups))


def readable_documents_q(*, access_groups: Collection[str], all_groups: bool, path: str = "") -> Q:
    """`may_read_groups` as a filter on documents, or on rows that reach a document through
    `path` ("document", "task__document"); rows with no document there stay in."""
    if all_groups:
        return Q()
    prefix = f"{path}__" if path else ""
    readable = Q(**{f"{prefix}access_groups": []})
    if access_groups:
        readable |= Q(**{f"{prefix}access_groups__overlap": sorted(access_groups)})
    return Q(**{f"{path}__isnull": True}) | readable if path else readable


def access_groups_not_held(
    *, groups: Iterable[str], access_groups: Collection[str], all_groups: bool
) -> list[str]:
    """The groups in `groups` a caller may not put a document behind: those it does not hold
    (none for callers that read every group), so it never writes what it could not read back."""
    return [] if all_groups else sorted(set(groups) - set(access_groups))


def access_groups_clearing_refused(
    *, before: Iterable[str], after: Iterable[str], access_groups: Collection[str], all_groups: bool
) -> str | None:
    """Removing every group of a restricted document makes it readable by everyone in the
    tenant, so only a caller who holds all of them may: why this change is refused (None:
    allowed, or not a clearing). Narrowing a document's groups is allowed."""
    if all_groups or set(after) or not set(before):
        return None
    missing = sorted(set(before) - set(access_groups))
    if not missing:
        return None
    return gettext(
        "Only a holder of every group of a restricted document may make it readable by "
        "everyone; you do not hold: %(groups)s."
    ) % {"groups": ", ".join(missing)}
