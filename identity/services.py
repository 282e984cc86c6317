"""Writes of sign-in: the user a provider's identity signs in as (created at the first sign-in,
never matched to a local account by name or e-mail), what their claims give them (tenant
membership, role groups, access groups: set again at every sign-in and re-check), their
sessions (started, re-checked, ended), and the audit of mapping changes.

Locking: a sign-in or re-check of one identity takes its ExternalIdentity row FOR UPDATE, so two
at once apply their claims one after the other; a re-check takes its SignInSession row FOR
UPDATE first (a rotated refresh token is used once). Every function here is one transaction."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext

from identity import audit
from identity.mapping import ROLES, Grants, grants_of, roles_text
from identity.models import ROLE_CHOICES, ClaimMapping, ExternalIdentity, SignInSession
from identity.secrets import seal
from identity.sessions import SESSION_ID
from kb.models import TenantMembership

USERNAME_MAX = 150


class SignInRefused(Exception):
    """A sign-in Canon refuses: `message` is for the person, `reason` for the audit trail."""

    def __init__(self, message: str, *, reason: str, user_id: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.user_id = user_id
        self.audited = False  # on the audit trail already


@dataclass(frozen=True)
class ProviderIdentity:
    """Who the provider says signed in: its issuer (OIDC issuer, SAML IdP entity id), their
    stable subject there, the names Canon shows, and every claim or attribute it sent."""

    provider: str  # ExternalIdentity.Provider
    issuer: str
    subject: str
    username: str
    email: str
    first_name: str
    last_name: str
    claims: Mapping[str, Any]

    @property
    def who(self) -> str:
        return self.username or self.email or self.subject


def _refusal(who: ProviderIdentity, grants: Grants) -> SignInRefused | None:
    """Why these grants let nobody in, in words the person can take to an administrator."""
    if not grants.grants:
        sent = ", ".join(f"{claim}={value}" for claim, value in grants.unmatched[:10])
        message = (
            gettext(
                "Your account has no group that gives access to Canon (the provider sent "
                "%(sent)s). Ask an administrator to map one of your groups to a tenant and a role."
            )
            % {"sent": sent}
            if sent
            else gettext(
                "Your account has no group that gives access to Canon. Ask an administrator to "
                "map one of your groups to a tenant and a role."
            )
        )
        return SignInRefused(
            message, reason=f"no mapping matched ({sent or 'no mapped claim sent'})"
        )
    tenants = sorted({grant.tenant for grant in grants.grants})
    if len(tenants) > 1:
        return SignInRefused(
            gettext(
                "Your groups give access to more than one tenant (%(tenants)s), and a person "
                "works in one. Ask an administrator to change the mapping."
            )
            % {"tenants": ", ".join(tenants)},
            reason=f"claims map to several tenants: {', '.join(tenants)}",
        )
    if not grants.roles:
        roles = dict(ROLE_CHOICES)
        return SignInRefused(
            gettext(
                "Your groups give you access groups in %(tenant)s but no role in Canon's admin. "
                "Ask an administrator for a group mapped to %(first)s or %(second)s."
            )
            % {"tenant": tenants[0], "first": roles[ROLES[0]], "second": roles[ROLES[1]]},
            reason="claims give no role",
        )
    return None


def identity_sign_in(*, who: ProviderIdentity, address: str | None) -> User:
    """The user `who` signs in as, with what their claims give applied. Raises SignInRefused
    (recorded on the audit trail) when the claims give no tenant, several tenants or no role,
    or the user is disabled in Canon. Records SIGN_IN."""
    grants = grants_of(who.claims)
    refusal = _refusal(who, grants)
    try:
        with transaction.atomic():
            identity = (
                ExternalIdentity.objects.select_for_update()
                .select_related("user")
                .filter(provider=who.provider, issuer=who.issuer, subject=who.subject)
                .first()
            )
            if identity is not None and not identity.user.is_active:
                refusal = SignInRefused(
                    gettext("This account is disabled in Canon. Ask an administrator."),
                    reason="user disabled in Canon",
                    user_id=identity.user_id,
                )
            if refusal is not None:
                refusal.user_id = identity.user_id if identity else None
                raise refusal
            if identity is None:
                identity = _identity_create(who)
            _names_update(identity.user, who)
            _apply(identity, grants)
            identity.signed_in_at = timezone.now()
            identity.save(update_fields=["signed_in_at"])
            audit.audit(
                audit.SIGN_IN,
                action=f"{identity.user.username} signed in through {who.provider}",
                subject_id=identity.user_id,
                actor_id=identity.user_id,
                provider=who.provider,
                subject=who.subject,
                address=address,
                tenant=sorted({grant.tenant for grant in grants.grants})[0],
                roles=sorted(grants.roles),
                access_groups=sorted(grants.access_groups),
            )
            return identity.user
    except SignInRefused as refused:
        sign_in_refused(
            who=who.who,
            provider=who.provider,
            address=address,
            reason=refused.reason,
            user_id=refused.user_id,
        )
        refused.audited = True
        raise


def sign_in_refused(
    *, who: str, provider: str, address: str | None, reason: str, user_id: int | None = None
) -> None:
    """A failed sign-in on the audit trail (a password, the provider's refusal, the mapping's)."""
    audit.audit(
        audit.SIGN_IN_REFUSED,
        action=f"sign-in refused for {who or 'someone unknown'}: {reason}",
        subject_id=user_id,
        who=who,
        provider=provider,
        address=address,
        reason=reason,
    )


def _identity_create(who: ProviderIdentity) -> ExternalIdentity:
    """A new user for a new identity: a free user name from the provider's, no usable
    password (they sign in through the provider only)."""
    base = _username_base(who)
    for attempt in range(1, 100):
        name = base if attempt == 1 else f"{base[: USERNAME_MAX - 4]}-{attempt}"
        if User.objects.filter(username=name).exists():
            continue
        try:
            with transaction.atomic():
                user = User(username=name, email=who.email, is_staff=True)
                user.set_unusable_password()
                user.save()
                return ExternalIdentity.objects.create(
                    user=user, provider=who.provider, issuer=who.issuer, subject=who.subject
                )
        except IntegrityError:  # the name was taken meanwhile, or this identity was created
            created = (
                ExternalIdentity.objects.select_related("user")
                .filter(provider=who.provider, issuer=who.issuer, subject=who.subject)
                .first()
            )
            if created is not None:  # by a concurrent first sign-in of the same person
                return created
    raise SignInRefused(
        gettext("Canon could not find a free user name for you; ask an administrator."),
        reason=f"no free user name from {base!r}",
    )


def _username_base(who: ProviderIdentity) -> str:
    text = who.username or who.email.split("@")[0] or who.subject
    name = re.sub(r"[^\w.@+-]", "-", text).strip("-")[: USERNAME_MAX - 4]
    return name or "user"


def _names_update(user: User, who: ProviderIdentity) -> None:
    changed: dict[str, object] = {
        field: value
        for field, value in (
            ("email", who.email),
            ("first_name", who.first_name[:150]),
            ("last_name", who.last_name[:150]),
        )
        if value and getattr(user, field) != value
    }
    for field, value in changed.items():
        setattr(user, field, value)
    if not user.is_staff:
        user.is_staff = True
        changed["is_staff"] = True
    if changed:
        user.save(update_fields=list(changed))


@dataclass(frozen=True)
class Access:
    """What a user holds, as the admin and the API read it: tenant, roles, access groups."""

    tenant_id: int | None
    roles: tuple[str, ...]
    access_groups: tuple[str, ...]


def _access_of(user: User) -> Access:
    membership = TenantMembership.objects.filter(user=user).first()
    return Access(
        tenant_id=membership.tenant_id if membership else None,
        roles=tuple(sorted(user.groups.filter(name__in=ROLES).values_list("name", flat=True))),
        access_groups=tuple(sorted(membership.access_groups)) if membership else (),
    )


def _apply(identity: ExternalIdentity, grants: Grants) -> tuple[Access, Access]:
    """Set the user's tenant membership, role groups and access groups to what `grants` give
    (roles only among Canon's two; other groups an admin gave by hand stay), and record the
    grants claim by claim. Returns the access before and after. In the caller's transaction,
    under its lock of `identity`."""
    user = identity.user
    before = _access_of(user)
    tenant_id = next(iter(grants.tenant_ids))
    TenantMembership.objects.update_or_create(
        user=user,
        defaults={"tenant_id": tenant_id, "access_groups": sorted(grants.access_groups)},
    )
    roles = {group.name: group for group in Group.objects.filter(name__in=ROLES)}
    user.groups.remove(*[group for name, group in roles.items() if name not in grants.roles])
    user.groups.add(*[group for name, group in roles.items() if name in grants.roles])
    identity.grants = [grant.as_json() for grant in grants.grants]
    identity.unmatched = [list(pair) for pair in grants.unmatched]
    identity.checked_at = timezone.now()
    identity.save(update_fields=["grants", "unmatched", "checked_at"])
    return before, _access_of(user)


def sign_in_session_start(
    *,
    user: User,
    session_key: str,
    provider_session: str = "",
    address: str | None,
    refresh_token: str = "",
    access_token: str = "",
    access_expires_at: datetime | None = None,
) -> SignInSession:
    """Record the browser session `user` just signed in with (after auth.login, whose new key
    it keeps), with the tokens that re-check it (sealed). The user's earlier sessions whose
    browser session is gone (expired, cookies cleared) are closed and their tokens dropped, so
    no token outlives the session it was kept for by more than the next sign-in."""
    identity = ExternalIdentity.objects.get(user=user)
    store = import_module(settings.SESSION_ENGINE).SessionStore
    for earlier in SignInSession.objects.filter(identity=identity, ended_at__isnull=True):
        if not store().exists(earlier.session_key):
            earlier.ended_at = timezone.now()
            earlier.end_reason = "the browser session ended"
            earlier.refresh_token = earlier.access_token = ""
            earlier.save(update_fields=["ended_at", "end_reason", "refresh_token", "access_token"])
    return SignInSession.objects.create(
        identity=identity,
        session_key=session_key,
        provider_session=provider_session[:500],
        address=address,
        checked_at=timezone.now(),
        refresh_token=seal(refresh_token),
        access_token=seal(access_token),
        access_expires_at=access_expires_at,
    )


def identity_access_update(
    *, session: SignInSession, claims: Mapping[str, Any], tokens: dict[str, Any] | None = None
) -> str | None:
    """A re-check's answer: apply what `claims` give now (ACCESS_CHANGED when that changed),
    keep the new tokens, and mark the session checked. Returns why the session must end
    instead (the claims give nothing, several tenants or no role; the user disabled in Canon),
    or None. Under the caller's lock of `session` (`session_for_recheck`)."""
    identity = (
        ExternalIdentity.objects.select_for_update()
        .select_related("user")
        .get(pk=session.identity_id)
    )
    if not identity.user.is_active:
        return "the user is disabled in Canon"
    grants = grants_of(claims)
    who = ProviderIdentity(
        provider=identity.provider,
        issuer=identity.issuer,
        subject=identity.subject,
        username=identity.user.username,
        email="",
        first_name="",
        last_name="",
        claims=claims,
    )
    refusal = _refusal(who, grants)
    if refusal is not None:
        return refusal.reason
    before, after = _apply(identity, grants)
    if before != after:
        audit.audit(
            audit.ACCESS_CHANGED,
            action=f"{identity.user.username}'s access changed at the provider's re-check",
            subject_id=identity.user_id,
            provider=identity.provider,
            before={"roles": list(before.roles), "access_groups": list(before.access_groups)},
            after={"roles": list(after.roles), "access_groups": list(after.access_groups)},
        )
    session.checked_at = timezone.now()
    fields = ["checked_at"]
    if tokens:
        for name in ("refresh_token", "access_token"):
            if tokens.get(name):
                setattr(session, name, seal(tokens[name]))
                fields.append(name)
        if tokens.get("access_expires_at"):
            session.access_expires_at = tokens["access_expires_at"]
            fields.append("access_expires_at")
    session.save(update_fields=fields)
    return None


def session_for_recheck(session_id: int) -> SignInSession | None:
    """The session row, locked FOR UPDATE (in the caller's transaction), or None when gone."""
    return (
        SignInSession.objects.select_for_update()
        .select_related("identity__user")
        .filter(pk=session_id)
        .first()
    )


def sign_in_session_end(*, session: SignInSession, reason: str, address: str | None = None) -> None:
    """End a session: mark it ended, delete its Django session (the browser is signed out at
    its next request), record SIGNED_OUT. Idempotent: an ended session changes nothing."""
    if session.ended_at is not None:
        return
    session.ended_at = timezone.now()
    session.end_reason = reason[:1000]
    session.refresh_token = session.access_token = ""
    session.save(update_fields=["ended_at", "end_reason", "refresh_token", "access_token"])
    store = import_module(settings.SESSION_ENGINE).SessionStore
    store(session_key=session.session_key).delete()
    audit.audit(
        audit.SIGNED_OUT,
        action=f"{session.identity.user.username} signed out: {reason}",
        subject_id=session.identity.user_id,
        provider=session.identity.provider,
        address=address,
        reason=reason,
    )


def provider_logout(
    *, provider: str, issuer: str, subject: str | None, provider_session: str | None
) -> int:
    """The provider ended a session (OIDC back-channel logout): end Canon's sessions of it, by
    the provider's session id when given, else every session of the subject. Returns how many
    ended. Idempotent."""
    sessions = SignInSession.objects.select_related("identity__user").filter(
        identity__provider=provider, identity__issuer=issuer, ended_at__isnull=True
    )
    if provider_session:
        sessions = sessions.filter(provider_session=provider_session)
    if subject:
        sessions = sessions.filter(identity__subject=subject)
    ended = 0
    with transaction.atomic():
        for session in sessions.select_for_update(of=("self",)):
            sign_in_session_end(session=session, reason="signed out at the identity provider")
            ended += 1
    return ended


def mapping_snapshot(mapping: ClaimMapping | None) -> dict[str, Any] | None:
    """A mapping row as the audit trail records it (its knowledge bases by slug)."""
    if mapping is None or mapping.pk is None:
        return None
    return {
        "claim": mapping.claim,
        "value": mapping.value,
        "tenant": mapping.tenant.slug,
        "role": mapping.role,
        "access_groups": sorted(mapping.access_groups),
        "knowledge_bases": sorted(kb.slug for kb in mapping.knowledge_bases.all()),
    }


def claim_mapping_recorded(
    *,
    mapping_id: int,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    actor_id: int | None,
) -> None:
    """A mapping row added, changed or deleted, on the audit trail (MAPPING_CHANGED), in the
    admin's transaction. Nothing when nothing changed. It applies to each person at their next
    sign-in or re-check, to each token at its next request."""
    if before == after:
        return
    what = "added" if before is None else "deleted" if after is None else "changed"
    row = after or before or {}
    audit.audit(
        audit.MAPPING_CHANGED,
        action=f"claim mapping {row.get('claim')}={row.get('value')} {what}: "
        f"{row.get('tenant')}, {roles_text([row['role']] if row.get('role') else [])}",
        subject_type="claim_mapping",
        subject_id=mapping_id,
        actor_id=actor_id,
        before=before,
        after=after,
    )


def signed_out_here(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    """The person signed out in Canon (Django's logout): their session's provider tokens are
    dropped and the sign-out recorded (SIGNED_OUT)."""
    session_id = getattr(request, "session", {}).get(SESSION_ID) if request is not None else None
    if not isinstance(session_id, int):
        return
    with transaction.atomic():
        session = session_for_recheck(session_id)
        if session is not None:
            sign_in_session_end(
                session=session,
                reason="signed out in Canon",
                address=audit.client_address(request),
            )
