"""Idempotently create the demo tenant, knowledge base, admin login and API key, and print them.

The knowledge base `handbook` gets the default embedding (`make run` sets it to the packaged
multilingual model, `use`). One that already exists keeps its index version, whatever it embeds
with (an old `.data` on `hash`): switching is *New index version…* in the admin, never a silent
rebuild.

The generated password and key are kept in .data/bootstrap.json (git-ignored, local only) so a
second run prints the same credentials instead of silently replacing them.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from kb import storage
from kb.models import Document, KnowledgeBase, Tenant, TenantMembership
from kb.services.documents import document_create
from kb.services.index_versions import knowledge_base_create
from retrieval.models import ApiKey
from retrieval.principals import api_key_create
from sources.models import Source
from sources.services.sources import SourceInvalid, source_save


class Command(BaseCommand):
    help = "Create the demo tenant, knowledge base, admin user and API key (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        state_path = Path(settings.BASE_DIR) / ".data" / "bootstrap.json"
        state: dict[str, Any] = json.loads(state_path.read_text()) if state_path.exists() else {}
        with transaction.atomic():
            tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo"})
            kb = KnowledgeBase.objects.filter(tenant=tenant, slug="handbook").first()
            if kb is None:
                kb = knowledge_base_create(tenant=tenant, name="Handbook", slug="handbook")
            user_model = get_user_model()
            username = os.environ.get("CANON_ADMIN_USER", "admin")
            user = user_model.objects.filter(username=username).first()
            if user is None or "password" not in state:
                state["password"] = os.environ.get("CANON_ADMIN_PASSWORD") or secrets.token_urlsafe(
                    12
                )
                if user is None:
                    user = user_model.objects.create_superuser(username, "", state["password"])
                else:
                    user.set_password(state["password"])
                    user.save()
            TenantMembership.objects.get_or_create(user=user, defaults={"tenant": tenant})
            key_ok = (
                "api_key" in state
                and ApiKey.objects.filter(
                    prefix=state["api_key"].split("_")[1], revoked_at__isnull=True
                ).exists()
            )
            if not key_ok:
                _, state["api_key"] = api_key_create(tenant=tenant, name="demo key")
            if not state.get("demo_documents") and settings.DEMO_DOCUMENTS:
                state["demo_documents"] = demo_documents_upload(kb=kb)
            share = demo_source_create(kb=kb)
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps(state))
        state_path.chmod(0o600)
        port = os.environ.get("CANON_WEB_PORT", "8000")
        version = kb.active_index_version
        embedding = (
            f"{version.provider} {version.model} ({version.dimensions}d)" if version else "none"
        )
        if version is not None and version.provider != settings.EMBEDDING_PROVIDER:
            embedding += (
                f"; the default is now {settings.EMBEDDING_PROVIDER}: switch with "
                "*New index version…* on the knowledge base in the admin"
            )
        self.stdout.write(
            "\n".join(
                [
                    "",
                    "Canon is ready.",
                    f"  admin:    http://127.0.0.1:{port}/admin/   user {username}  "
                    f"password {state['password']}",
                    f"  search:   POST http://127.0.0.1:{port}/api/v1/search",
                    f"  {kb.slug} embeds with {embedding}",
                    f"  API key:  {state['api_key']}",
                    f"  example:  curl -s -H 'Authorization: Bearer {state['api_key']}' "
                    f"-H 'Content-Type: application/json' "
                    f'-d \'{{"kb": "{kb.slug}", "query": "how many vacation days do I get"}}\' '
                    f"http://127.0.0.1:{port}/api/v1/search",
                    *(
                        [
                            f"  source:   put files in {share} and press *Sync now…* on the "
                            "source 'Shared folder' (the knowledge base's home)"
                        ]
                        if share
                        else []
                    ),
                    "",
                ]
            )
        )


DEMO_DIR = Path(__file__).resolve().parents[2] / "demo"
DEMO_SHARE_NOTE = """# The shared folder

Files put in this folder become documents of the Handbook knowledge base when its source
*Shared folder* syncs: press *Sync now…* on the source's page. A changed file becomes a new
revision, a deleted file's document is deleted (restorable), and nothing is deleted after a
listing that failed.
"""


def demo_source_create(*, kb: KnowledgeBase) -> str:
    """A folder source over the first of `SOURCES_FOLDER_ROOTS` (`make run` sets .data/share),
    with a note in it, once; returns the folder, or "" when no folder may be read."""
    if not settings.SOURCES_FOLDER_ROOTS:
        return ""
    share = Path(settings.SOURCES_FOLDER_ROOTS[0])
    existing = Source.objects.filter(kb=kb, slug="share").first()
    if existing is not None:
        return str(existing.config.get("path", ""))
    share.mkdir(parents=True, exist_ok=True)
    note = share / "shared-folder.md"
    if not note.exists():
        note.write_text(DEMO_SHARE_NOTE)
    try:
        source_save(
            kb=kb, name="Shared folder", slug="share", kind="folder", config={"path": str(share)}
        )
    except SourceInvalid:
        return ""
    return str(share)


def demo_documents_upload(*, kb: KnowledgeBase) -> int:
    """Upload the sample handbook (console/demo: English and Chinese Markdown) into an empty demo
    knowledge base, once; the worker builds it like any upload. Returns how many it queued."""
    if Document.objects.filter(kb=kb).exists():
        return 0
    uploaded = 0
    for path in sorted(DEMO_DIR.glob("*.md")):
        document_create(
            kb=kb,
            key=path.stem,
            title="",  # the extractor takes the first heading
            stored=storage.store_bytes(path.read_bytes()),
            media_type="text/markdown",
            original_name=path.name,
        )
        uploaded += 1
    return uploaded
