"""From claims to grants: which mapping rows the claims of a person (at sign-in and at each
re-check) or of a token (at each request) match, and what they give together. Reads only.

The rows are the admin's (`ClaimMapping`) and, for automated deployments, those of
CANON_IDENTITY_MAPPING (a JSON list, checked at start by system check identity.E001). A row
gives its tenant, role, access groups and (tokens) knowledge bases when its claim holds its
value; a value that no row names gives nothing, and claims that give nothing grant nothing."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.contrib.postgres.aggregates import ArrayAgg
from django.core.exceptions import ImproperlyConfigured

from identity.models import ClaimMapping
from kb.models import KnowledgeBase, Tenant
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS

logger = logging.getLogger(__name__)

ROLES = (CONTENT_MANAGERS, INDEX_ADMINS)
# OAuth's scope is one string of space-separated values (RFC 6749 3.3); other string claims are
# one value each ("Finance Team" is one group).
SPACE_SEPARATED = frozenset({"scope", "scp"})
MAX_VALUES = 1000  # of one claim: a provider sending more is cut here, never looped over


@dataclass(frozen=True)
class Grant:
    """What one value of one claim gave, through one mapping row."""

    claim: str
    value: str
    mapping_id: int | None  # None: a row of CANON_IDENTITY_MAPPING
    tenant_id: int
    tenant: str  # its slug, as the admin shows it
    role: str
    access_groups: tuple[str, ...]
    kb_ids: tuple[int, ...]  # tokens only; empty: every knowledge base of the tenant

    def as_json(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "value": self.value,
            "mapping_id": self.mapping_id,
            "tenant_id": self.tenant_id,
            "tenant": self.tenant,
            "role": self.role,
            "access_groups": list(self.access_groups),
            "kb_ids": list(self.kb_ids),
        }


@dataclass(frozen=True)
class Grants:
    """What a set of claims gives: the grants of every matched row, and the values of the
    mapped claims that matched nothing (shown to admins, never granting anything)."""

    grants: tuple[Grant, ...]
    unmatched: tuple[tuple[str, str], ...]

    @property
    def tenant_ids(self) -> frozenset[int]:
        return frozenset(grant.tenant_id for grant in self.grants)

    @property
    def roles(self) -> frozenset[str]:
        return frozenset(grant.role for grant in self.grants if grant.role)

    @property
    def access_groups(self) -> frozenset[str]:
        return frozenset(group for grant in self.grants for group in grant.access_groups)

    @property
    def kb_ids(self) -> frozenset[int] | None:
        """The knowledge bases a token may read: None (every one of the tenant) when a matched
        row names none, else the union of those named."""
        if any(not grant.kb_ids for grant in self.grants):
            return None
        return frozenset(kb_id for grant in self.grants for kb_id in grant.kb_ids)

    def as_json(self) -> dict[str, Any]:
        return {
            "grants": [grant.as_json() for grant in self.grants],
            "unmatched": [list(pair) for pair in self.unmatched],
        }


def claim_values(claims: Mapping[str, Any], name: str) -> list[str]:
    """The values of claim `name`: a list's strings, one string (split on spaces for OAuth's
    `scope`), a number or boolean as text. A dotted name reads inside objects
    (`realm_access.roles`). Missing: none."""
    value: Any = claims.get(name)
    if value is None and "." in name:
        value = claims
        for part in name.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else [value]
    values: list[str] = []
    for item in items[:MAX_VALUES]:
        if isinstance(item, bool):
            item = "true" if item else "false"
        if isinstance(item, str | int | float):
            text = str(item)
            values.extend(text.split() if name in SPACE_SEPARATED else [text])
    return values[:MAX_VALUES]


@dataclass(frozen=True)
class _Row:
    claim: str
    value: str
    mapping_id: int | None
    tenant_id: int
    tenant: str
    role: str
    access_groups: tuple[str, ...]
    kb_ids: tuple[int, ...]


def _admin_rows() -> list[_Row]:
    rows = ClaimMapping.objects.values(
        "pk", "claim", "value", "tenant_id", "tenant__slug", "role", "access_groups"
    ).annotate(kbs=ArrayAgg("knowledge_bases__id", distinct=True, default=[]))
    return [
        _Row(
            claim=row["claim"],
            value=row["value"],
            mapping_id=row["pk"],
            tenant_id=row["tenant_id"],
            tenant=row["tenant__slug"],
            role=row["role"],
            access_groups=tuple(row["access_groups"]),
            kb_ids=tuple(sorted(kb for kb in row["kbs"] if kb is not None)),
        )
        for row in rows
    ]


@dataclass(frozen=True)
class SettingsRow:
    """A row of CANON_IDENTITY_MAPPING, as written (tenant and knowledge bases by slug)."""

    claim: str
    value: str
    tenant: str
    role: str
    access_groups: tuple[str, ...]
    knowledge_bases: tuple[str, ...]


def settings_rows() -> list[SettingsRow]:
    """CANON_IDENTITY_MAPPING read and checked; ImproperlyConfigured names the row and the
    field that is wrong."""
    return list(_parse_settings_rows(settings.IDENTITY_MAPPING, settings.IDENTITY_GROUPS_CLAIM))


@lru_cache(maxsize=4)
def _parse_settings_rows(text: str, default_claim: str) -> tuple[SettingsRow, ...]:
    if not text.strip():
        return ()
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ImproperlyConfigured(f"CANON_IDENTITY_MAPPING is not JSON: {exc}") from None
    if not isinstance(data, list):
        raise ImproperlyConfigured("CANON_IDENTITY_MAPPING must be a JSON list of rows")
    rows = []
    for i, item in enumerate(data):
        where = f"CANON_IDENTITY_MAPPING[{i}]"
        if not isinstance(item, dict):
            raise ImproperlyConfigured(f"{where} must be an object")
        unknown = sorted(
            set(item) - {"claim", "value", "tenant", "role", "access_groups", "knowledge_bases"}
        )
        if unknown:
            raise ImproperlyConfigured(f"{where}: unknown field {', '.join(unknown)}")
        claim = item.get("claim", default_claim)
        value, tenant, role = item.get("value"), item.get("tenant"), item.get("role", "")
        groups, kbs = item.get("access_groups", []), item.get("knowledge_bases", [])
        if not isinstance(claim, str) or not claim:
            raise ImproperlyConfigured(f"{where}.claim must be a claim's name")
        if not isinstance(value, str) or not value:
            raise ImproperlyConfigured(f"{where}.value must be the claim's value, as text")
        if not isinstance(tenant, str) or not tenant:
            raise ImproperlyConfigured(f"{where}.tenant must be a tenant's slug")
        if role not in ("", *ROLES):
            raise ImproperlyConfigured(
                f"{where}.role must be {CONTENT_MANAGERS!r}, {INDEX_ADMINS!r} or empty"
            )
        for field, names in (("access_groups", groups), ("knowledge_bases", kbs)):
            if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
                raise ImproperlyConfigured(f"{where}.{field} must be a list of names")
        rows.append(SettingsRow(claim, value, tenant, role, tuple(sorted(set(groups))), tuple(kbs)))
    return tuple(rows)


def _settings_rows_resolved() -> list[_Row]:
    """The settings' rows with their tenant and knowledge bases found by slug; a row naming a
    tenant or knowledge base that does not exist grants nothing (and is logged)."""
    rows = settings_rows()
    if not rows:
        return []
    tenants = dict(
        Tenant.objects.filter(slug__in={row.tenant for row in rows}).values_list("slug", "pk")
    )
    kbs = {
        (tenant_id, slug): pk
        for pk, tenant_id, slug in KnowledgeBase.objects.filter(
            tenant_id__in=tenants.values()
        ).values_list("pk", "tenant_id", "slug")
    }
    resolved = []
    for row in rows:
        tenant_id = tenants.get(row.tenant)
        kb_ids = [kbs.get((tenant_id or 0, slug)) for slug in row.knowledge_bases]
        if tenant_id is None or None in kb_ids:
            logger.warning(
                "CANON_IDENTITY_MAPPING row %s=%s names a tenant or knowledge base that does not "
                "exist; it grants nothing",
                row.claim,
                row.value,
            )
            continue
        resolved.append(
            _Row(
                claim=row.claim,
                value=row.value,
                mapping_id=None,
                tenant_id=tenant_id,
                tenant=row.tenant,
                role=row.role,
                access_groups=row.access_groups,
                kb_ids=tuple(sorted(kb for kb in kb_ids if kb is not None)),
            )
        )
    return resolved


def grants_of(claims: Mapping[str, Any]) -> Grants:
    """What `claims` give through the mapping (the admin's rows and the settings'); two
    queries, three with settings rows."""
    rows = [*_settings_rows_resolved(), *_admin_rows()]
    names = sorted({row.claim for row in rows} | {settings.IDENTITY_GROUPS_CLAIM})
    values = {name: claim_values(claims, name) for name in names}
    grants = tuple(
        Grant(
            claim=row.claim,
            value=row.value,
            mapping_id=row.mapping_id,
            tenant_id=row.tenant_id,
            tenant=row.tenant,
            role=row.role,
            access_groups=row.access_groups,
            kb_ids=row.kb_ids,
        )
        for row in rows
        if row.value in values[row.claim]
    )
    matched = {(grant.claim, grant.value) for grant in grants}
    unmatched = tuple(
        (name, value)
        for name in names
        for value in dict.fromkeys(values[name])
        if (name, value) not in matched
    )
    return Grants(grants=grants, unmatched=unmatched)


def roles_text(roles: Iterable[str]) -> str:
    return ", ".join(sorted(roles)) or "no role"


def mapped_scopes() -> list[str]:
    """The OAuth scopes the mapping reads (rows on `scope`), for a protected resource's
    metadata: what a client may ask its provider for."""
    admin = ClaimMapping.objects.filter(claim__in=SPACE_SEPARATED).values_list("value", flat=True)
    configured = [row.value for row in settings_rows() if row.claim in SPACE_SEPARATED]
    return sorted({*admin, *configured})
