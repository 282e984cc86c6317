"""The mapping from an identity provider's claims to what Canon grants, the people who sign in
through a provider, and their sessions (re-checked, ended when the provider says so)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils.translation import gettext_lazy, pgettext_lazy

from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS

# The roles keep their groups' English names as values; people read them in their language.
ROLE_CHOICES = [
    ("", gettext_lazy("No role (access groups only)")),
    (CONTENT_MANAGERS, pgettext_lazy("role", "Content managers")),
    (INDEX_ADMINS, pgettext_lazy("role", "Index admins")),
]


class ClaimMapping(models.Model):
    """One value of one claim (or SAML attribute, or token scope) and what it gives: membership
    of a tenant, a role, access groups and, for tokens, knowledge bases. A person or a token
    gets the union of what its values give; a value no row names gives nothing."""

    claim = models.CharField(
        max_length=200,
        verbose_name=gettext_lazy("claim"),
        help_text=gettext_lazy(
            "The claim's name as the provider sends it: groups, roles, scope, or a SAML "
            "attribute's name (memberOf); realm_access.roles reads inside an object. A list is "
            "several values; scope is split on spaces."
        ),
    )
    value = models.CharField(
        max_length=500,
        verbose_name=gettext_lazy("value"),
        help_text=gettext_lazy("One value of the claim, exactly as sent (case counts)."),
    )
    tenant = models.ForeignKey(
        "kb.Tenant",
        on_delete=models.PROTECT,
        related_name="+",
        verbose_name=gettext_lazy("tenant"),
    )
    role = models.CharField(
        max_length=64,
        blank=True,
        choices=ROLE_CHOICES,
        verbose_name=gettext_lazy("role"),
        help_text=gettext_lazy(
            "What the person may do in the admin; a token with a role may also upload "
            "and delete (content managers) and manage sources (index admins). No role: only "
            "the access groups and knowledge bases below."
        ),
    )
    access_groups = ArrayField(
        models.CharField(max_length=100),
        default=list,
        blank=True,
        verbose_name=gettext_lazy("access groups"),
        help_text=gettext_lazy(
            "Comma-separated, e.g. finance,hr: documents behind these groups become "
            "readable, in the admin and through the API."
        ),
    )
    knowledge_bases = models.ManyToManyField(
        "kb.KnowledgeBase",
        blank=True,
        related_name="+",
        verbose_name=gettext_lazy("knowledge bases"),
        help_text=gettext_lazy(
            "Tokens only: the knowledge bases a token with this value may search (none "
            "chosen: every knowledge base of the tenant). People see their tenant's knowledge "
            "bases; their access groups decide which documents."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=gettext_lazy("updated at"))

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["claim", "value"], name="claim_mapping_unique_value")
        ]
        ordering = ["claim", "value"]
        verbose_name = gettext_lazy("claim mapping")
        verbose_name_plural = gettext_lazy("claim mappings")

    def __str__(self) -> str:
        return f"{self.claim} = {self.value}"


class ExternalIdentity(models.Model):
    """A user who signs in through a provider: who the provider says they are (issuer and
    subject, never matched to a local account by name or e-mail), and what their last sign-in
    or re-check gave them, claim by claim (`grants`: the admin's "source of access")."""

    class Provider(models.TextChoices):
        OIDC = "oidc", "OpenID Connect"
        SAML = "saml", "SAML 2.0"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="external_identity",
        verbose_name=gettext_lazy("user"),
    )
    provider = models.CharField(
        max_length=8, choices=Provider.choices, verbose_name=gettext_lazy("provider")
    )
    issuer = models.CharField(max_length=500, verbose_name=gettext_lazy("issuer"))
    subject = models.CharField(max_length=500, verbose_name=gettext_lazy("subject"))
    # [{"claim", "value", "mapping_id" | None (settings), "tenant", "role", "access_groups",
    #   "knowledge_bases"}], and the values that matched no mapping: [[claim, value], ...]
    grants = models.JSONField(default=list, blank=True, verbose_name=gettext_lazy("grants"))
    unmatched = models.JSONField(default=list, blank=True, verbose_name=gettext_lazy("unmatched"))
    signed_in_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("signed in at")
    )
    checked_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("checked at")
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "issuer", "subject"], name="external_identity_unique_subject"
            )
        ]
        verbose_name = gettext_lazy("external identity")
        verbose_name_plural = gettext_lazy("external identities")

    def __str__(self) -> str:
        return f"{self.get_provider_display()} {self.subject}"


class SignInSession(models.Model):
    """One browser session signed in through the provider: which Django session it is, the
    provider's session id (OIDC `sid`, for back-channel logout), the tokens that re-check it
    (encrypted: `identity.secrets`), and when it was last re-checked or why it ended."""

    identity = models.ForeignKey(
        ExternalIdentity,
        on_delete=models.CASCADE,
        related_name="+",
        verbose_name=gettext_lazy("external identity"),
    )
    session_key = models.CharField(
        max_length=64, db_index=True, verbose_name=gettext_lazy("session key")
    )
    provider_session = models.CharField(
        max_length=500, blank=True, db_index=True, verbose_name=gettext_lazy("provider session")
    )
    address = models.GenericIPAddressField(
        null=True, blank=True, verbose_name=gettext_lazy("address")
    )
    started_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("started at"))
    checked_at = models.DateTimeField(verbose_name=gettext_lazy("checked at"))
    ended_at = models.DateTimeField(null=True, blank=True, verbose_name=gettext_lazy("ended at"))
    end_reason = models.TextField(blank=True, verbose_name=gettext_lazy("end reason"))
    refresh_token = models.TextField(blank=True, verbose_name=gettext_lazy("refresh token"))
    access_token = models.TextField(blank=True, verbose_name=gettext_lazy("access token"))
    access_expires_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("access expires at")
    )

    class Meta:
        verbose_name = gettext_lazy("sign-in session")
        verbose_name_plural = gettext_lazy("sign-in sessions")

    def __str__(self) -> str:
        return f"session {self.pk} of {self.identity}"
