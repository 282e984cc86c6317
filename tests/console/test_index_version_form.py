"""The admin's *New index version…* form: every provider this installation can run, each with
its default model and dimensions, and a dimension the model does not produce is a form error."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from kb.models import IndexVersion, KnowledgeBase

pytestmark = pytest.mark.django_db


@pytest.fixture
def client_for(admin_user: Any) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def new_version(client: Client, kb: KnowledgeBase, **fields: Any) -> Any:
    data = {"chunk_size": 800, "chunk_overlap": 100, "model": "", "dimensions": "", **fields}
    return client.post(reverse("admin:kb_indexversion_new", args=[kb.pk]), data)


def test_the_form_offers_every_runnable_provider_with_its_defaults(
    client_for: Client, kb: KnowledgeBase
) -> None:
    page = client_for.get(reverse("admin:kb_indexversion_new", args=[kb.pk])).content.decode()

    for name in ("hash", "openai", "use", "minilm"):
        assert f'<option value="{name}"' in page
    # sentence-transformers is an optional extra, not installed by make test
    assert '<option value="sentence-transformers"' not in page
    assert "use → use-multilingual-v3" in page and "use → 512" in page
    assert "minilm → all-MiniLM-L6-v2-int8" in page and "minilm → 384" in page


def test_a_blank_model_and_dimension_take_the_providers_defaults(
    client_for: Client, kb: KnowledgeBase
) -> None:
    response = new_version(client_for, kb, provider="use")

    assert response.status_code == 302, response.context["form"].errors
    version = IndexVersion.objects.get(kb=kb, number=2)
    assert (version.provider, version.model, version.dimensions) == (
        "use",
        "use-multilingual-v3",
        512,
    )
    assert version.state == IndexVersion.State.BUILDING


def test_a_dimension_the_model_does_not_produce_is_a_form_error(
    client_for: Client, kb: KnowledgeBase
) -> None:
    response = new_version(client_for, kb, provider="use", dimensions=384)

    assert response.status_code == 200
    assert response.context["form"].errors == {
        "dimensions": ["use-multilingual-v3 produces 512 dimensions, not 384."]
    }
    unknown = new_version(client_for, kb, provider="use", model="use-large", dimensions=512)
    assert unknown.context["form"].errors["model"] == [
        "The use provider has no model 'use-large'; it has use-multilingual-v3."
    ]
    assert IndexVersion.objects.filter(kb=kb).count() == 1


def test_a_provider_that_is_not_installed_cannot_be_chosen(
    client_for: Client, kb: KnowledgeBase
) -> None:
    response = new_version(client_for, kb, provider="sentence-transformers", model="mini")

    assert "provider" in response.context["form"].errors
