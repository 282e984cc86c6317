"""Create an API key from the command line and print it (the only time it is shown)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from kb.models import KnowledgeBase, Tenant
from retrieval.principals import api_key_create


class Command(BaseCommand):
    help = "Create an API key for a tenant and print it; only its hash is stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument(
            "--kb",
            action="append",
            default=[],
            metavar="SLUG",
            help="limit the key to this knowledge base (repeatable; default: all of the tenant)",
        )
        parser.add_argument("--groups", default="", help="access groups, comma-separated")
        parser.add_argument("--name", default="", help="a name to recognise the key by")
        parser.add_argument("--expires-days", type=int, default=None, help="expire after N days")
        parser.add_argument(
            "--history", action="store_true", help="may search as of a past time (as_of)"
        )
        parser.add_argument(
            "--sources",
            action="store_true",
            help="may manage sources: list, create, change, sync, confirm deletions",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant with slug {options['tenant']!r}.")
        slugs = list(dict.fromkeys(options["kb"]))
        kbs = list(KnowledgeBase.objects.filter(tenant=tenant, slug__in=slugs))
        missing = sorted(set(slugs) - {kb.slug for kb in kbs})
        if missing:
            raise CommandError(f"No knowledge base {', '.join(missing)} in tenant {tenant.slug}.")
        days = options["expires_days"]
        if days is not None and days < 1:
            raise CommandError("--expires-days must be at least 1.")
        groups = [g.strip() for g in options["groups"].split(",") if g.strip()]
        if any(len(g) > 100 for g in groups):
            raise CommandError("An access group name is at most 100 characters.")
        key, plaintext = api_key_create(
            tenant=tenant,
            name=options["name"] or f"{tenant.slug} key",
            knowledge_bases=kbs,
            access_groups=groups,
            expires_at=timezone.now() + timedelta(days=days) if days else None,
            can_read_history=options["history"],
            can_manage_sources=options["sources"],
        )
        self.stderr.write(f"Created API key {key.prefix} for {tenant.slug}; it is not shown again.")
        self.stdout.write(plaintext)
