"""What the compatibility tests search: two tenants, knowledge bases with declared metadata
fields, documents published through the real pipeline (one behind an access group), keys with
and without the group or limited to one knowledge base; and Canon's real web process (the
Procfile's gunicorn) against the test database for the clients that talk HTTP. The world and the
server are the package's, built once; the world is committed (`shared_data`), so the server's
own connections see it, and the tests only read it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings

from kb.models import Document, KnowledgeBase, MetadataField, Tenant
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import api_key_create
from tests.conftest import shared_data
from tests.production_support import Service, procfile_web
from tests.retrieval.factories import publish


@pytest.fixture(autouse=True)
def _own_rate_limit_counters(settings: Any) -> None:
    """Rate-limit counters of each test's own (as tests/retrieval's)."""
    caches = {name: dict(config) for name, config in settings.CACHES.items()}
    caches["default"]["KEY_PREFIX"] = f"canon-test-{uuid.uuid4().hex}"
    settings.CACHES = caches


@dataclass
class Web:
    service: Service
    url: str


@pytest.fixture(scope="package")
def web(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    """The Procfile's web process (gunicorn, DEBUG off), one worker of two threads, with
    rate-limit counters of its own."""
    with procfile_web(
        tmp_path_factory.mktemp("web"),
        CANON_WEB_WORKERS="1",
        CANON_WEB_THREADS="2",
        CANON_STORAGE_ROOT=str(settings.STORAGE_ROOT),
        CANON_CACHE_KEY_PREFIX=f"canon-compat-test-{uuid.uuid4().hex}",
    ) as (service, port):
        yield Web(service, f"http://127.0.0.1:{port}")


@dataclass
class World:
    tenant: Tenant
    handbook: KnowledgeBase
    archive: KnowledgeBase
    foreign: KnowledgeBase
    key: str  # acme, every knowledge base, no access group
    secret_key: str  # acme, group "secret"
    handbook_key: str  # acme, the handbook only
    foreign_key: str  # another tenant
    vacation_document: int
    secret_document: int


def _fields(kb: KnowledgeBase) -> None:
    MetadataField.objects.create(kb=kb, name="department", type=MetadataField.Type.STRING)
    MetadataField.objects.create(kb=kb, name="year", type=MetadataField.Type.NUMBER)
    # Held by some documents only: what the filters make of a document without a value.
    MetadataField.objects.create(kb=kb, name="audience", type=MetadataField.Type.STRING)
    MetadataField.objects.create(kb=kb, name="published", type=MetadataField.Type.DATE)


@pytest.fixture(scope="package")
def world(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    """One world for the package's tests, which only read it (tests/conftest.py: shared_data)."""
    with shared_data(django_db_blocker, tmp_path_factory, _world) as world:
        yield world


def _world() -> World:
    tenant = Tenant.objects.create(name="Acme", slug="acme")
    handbook = knowledge_base_create(tenant=tenant, name="Handbook", slug="handbook")
    archive = knowledge_base_create(tenant=tenant, name="Archive", slug="archive")
    other = Tenant.objects.create(name="Other", slug="other")
    foreign = knowledge_base_create(tenant=other, name="Foreign", slug="foreign")
    _fields(handbook)
    vacation = publish(
        handbook,
        "vacation",
        "# Leave\n\nVacation policy: every employee has thirty days of paid vacation per year.",
    )
    publish(handbook, "expenses", "Expense policy: vacation travel is not reimbursed.")
    secret = publish(
        handbook,
        "merger",
        "# Plans\n\nThe secret vacation merger plan is confidential.",
        groups=("secret",),
    )
    Document.objects.filter(kb=handbook, key="vacation").update(
        metadata={"department": "hr", "year": 2026, "audience": "staff", "published": "2026-01-15"}
    )
    Document.objects.filter(kb=handbook, key="expenses").update(
        metadata={"department": "finance", "year": 2025}  # no audience, never published
    )
    Document.objects.filter(kb=handbook, key="merger").update(
        metadata={"department": "hr", "year": 2026, "audience": "board"}
    )
    publish(archive, "old-vacation", "The old vacation policy gave twenty days.")
    publish(foreign, "foreign-vacation", "Foreign vacation rules of another tenant.")
    _, key = api_key_create(tenant=tenant, name="all")
    _, secret_key = api_key_create(tenant=tenant, name="secret", access_groups=["secret"])
    _, handbook_key = api_key_create(tenant=tenant, name="hb", knowledge_bases=[handbook])
    _, foreign_key = api_key_create(tenant=other, name="other")
    return World(
        tenant=tenant,
        handbook=handbook,
        archive=archive,
        foreign=foreign,
        key=key,
        secret_key=secret_key,
        handbook_key=handbook_key,
        foreign_key=foreign_key,
        vacation_document=vacation.document_id,
        secret_document=secret.document_id,
    )
