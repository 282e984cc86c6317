"""Helpers of the admin and API tests of sources: people in roles, and a run that holds
deletions for confirmation, built through the services as a sync would leave it."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.utils import timezone

from kb import storage
from kb.models import Document, Tenant, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.documents import document_create
from sources.models import Source, SourceItem, SyncRun
from sources.services.runs import sync_request
from work.models import IngestionTask

PASSWORD = "a-long-test-password"


def role_user(
    name: str, tenant: Tenant, role: str = INDEX_ADMINS, groups: tuple[str, ...] = ()
) -> User:
    """A staff user of `tenant` in `role` (Content managers or Index admins), holding `groups`."""
    ensure_roles(Group, Permission)
    user = User.objects.create_user(name, password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    TenantMembership.objects.create(user=user, tenant=tenant, access_groups=list(groups))
    return user


def client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def index_admin(tenant: Tenant, name: str = "ian", groups: tuple[str, ...] = ()) -> Client:
    return client_of(role_user(name, tenant, INDEX_ADMINS, groups))


def content_manager(tenant: Tenant, name: str = "carol") -> Client:
    return client_of(role_user(name, tenant, CONTENT_MANAGERS))


def synced_document(source: Source, path: str, text: str, groups: tuple[str, ...] = ()) -> Document:
    """A document as a sync of `source` makes it: its revision, and its manifest row."""
    revision = document_create(
        kb=source.kb,
        key=f"{source.slug}/{path}",
        title=path,
        stored=storage.store_bytes(text.encode()),
        media_type="text/plain",
        original_name=path.rsplit("/", 1)[-1],
        access_groups=groups or source.access_groups,
    )
    SourceItem.objects.create(
        source=source,
        path=path,
        document=revision.document,
        version=f"v-{path}",
        revision_number=revision.number,
        last_outcome="new",
    )
    return revision.document


def awaiting_run(source: Source, paths: list[str]) -> SyncRun:
    """A run of `source` that found `paths` gone and holds their deletion for a person, as
    `sources.sync` leaves one over its threshold (its task done)."""
    run, _ = sync_request(source=source)
    assert run.task_id is not None
    IngestionTask.objects.filter(pk=run.task_id).update(status=IngestionTask.Status.SUCCEEDED)
    SyncRun.objects.filter(pk=run.pk).update(
        state=SyncRun.State.AWAITING_CONFIRMATION,
        listing_complete=True,
        deletions_planned=len(paths),
        deletion_note=f"{len(paths)} deletions wait for a person: more than "
        f"{source.delete_threshold_percent} % of the source's documents.",
        finished_at=timezone.now(),
    )
    SourceItem.objects.filter(source=source, path__in=paths).update(pending_delete_run=run)
    run.refresh_from_db()
    return run
