"""Nothing the admin offers names another tenant: for every registered model admin, its list
(with every filter's choices, and every filter set to another tenant's ids), its add and change
forms (every choice list) and every autocomplete field, as each kind of staff user of tenant B.
The model admins come from the admin site, so one registered later is walked too."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.filters import RelatedFieldListFilter
from django.db.models import Model
from django.test import Client

from console.admin.documents import DocumentAdmin
from console.admin.knowledge_bases import KnowledgeBaseAdmin
from kb.models import Document, KnowledgeBase
from retrieval.models import ApiKey
from tests.console.admin_world import MARK_A, World, build_world
from tests.console.test_admin_lookups import leaks

pytestmark = pytest.mark.django_db

USERS = ["carol", "ian"]


@pytest.fixture
def world(db: None) -> World:
    return build_world()


def _url(model: type[Model], view: str, *args: Any) -> str:
    meta = model._meta
    path = "/".join(str(a) for a in args)
    return f"/admin/{meta.app_label}/{meta.model_name}/{path + '/' if path else ''}{view}"


def _foreign_rows(world: World, queryset: Any) -> set[Any]:
    return set(queryset.values_list("pk", flat=True)) & world.ids_a.get(queryset.model, set())


def _get(client: Client, url: str, failures: list[str]) -> Any:
    response = client.get(url)
    if response.status_code >= 500:
        failures.append(f"{url}: {response.status_code}")
    elif response.status_code == 200:
        leak = leaks(response.content.decode(errors="replace"), hr=True)
        if leak:
            failures.append(f"{url} shows {leak}")
    return response


def _check_filters(world: World, client: Client, model: type[Model], failures: list[str]) -> None:
    """The list, every filter's choices, and every relation filter set to foreign ids."""
    url = _url(model, "")
    response = _get(client, url, failures)
    if response.status_code != 200:
        return
    changelist = response.context["cl"]
    for spec in changelist.filter_specs:
        shown = [str(choice.get("display", "")) for choice in spec.choices(changelist)]
        if any(MARK_A in label.lower() for label in shown):
            failures.append(f"{url}: filter {spec.title!r} offers {shown}")
        if isinstance(spec, RelatedFieldListFilter):
            related: Any = spec.field.related_model
            for foreign in sorted(world.ids_a.get(related, set())):
                _get(client, f"{url}?{spec.lookup_kwarg}={foreign}", failures)


def _check_forms(world: World, client: Client, model: type[Model], failures: list[str]) -> None:
    """The add form, and the change form of one of the user's own rows: every choice list."""
    own = sorted(world.ids_b.get(model, set()))
    for url in [_url(model, "add/")] + ([_url(model, "change/", own[0])] if own else []):
        response = _get(client, url, failures)
        if response.status_code != 200 or "adminform" not in response.context:
            continue
        for name, field in response.context["adminform"].form.fields.items():
            queryset = getattr(field, "queryset", None)
            if queryset is not None and _foreign_rows(world, queryset):
                failures.append(f"{url}: the choices of {name!r} hold another tenant's rows")


def _check_autocomplete(
    world: World, client: Client, model_admin: Any, failures: list[str]
) -> None:
    """Every autocomplete field's search (an empty term: every row it would offer)."""
    meta = model_admin.model._meta
    for name in model_admin.autocomplete_fields:
        url = (
            f"/admin/autocomplete/?app_label={meta.app_label}&model_name={meta.model_name}"
            f"&field_name={name}&term="
        )
        response = _get(client, url, failures)
        if response.status_code == 200:
            remote = meta.get_field(name).related_model
            foreign = {str(i) for i in world.ids_a.get(remote, set())}
            if {r["id"] for r in response.json()["results"]} & foreign:
                failures.append(f"{url} offers another tenant's rows")


@pytest.mark.parametrize("user", USERS)
def test_no_admin_page_filter_or_choice_names_another_tenant(world: World, user: str) -> None:
    client = world.client(user)
    client.raise_request_exception = False
    failures: list[str] = []
    assert len(admin.site._registry) >= 12
    for model, model_admin in admin.site._registry.items():
        _check_filters(world, client, model, failures)
        _check_forms(world, client, model, failures)
        _check_autocomplete(world, client, model_admin, failures)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("user", USERS)
def test_an_autocomplete_field_offers_only_the_users_rows(
    world: World, user: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No model admin uses autocomplete yet; one that does (here: a document's knowledge base)
    searches the related admin's scoped rows."""
    monkeypatch.setattr(DocumentAdmin, "autocomplete_fields", ["kb"])
    monkeypatch.setattr(KnowledgeBaseAdmin, "search_fields", ["name", "slug"])
    client = world.client(user)
    response = client.get(
        "/admin/autocomplete/?app_label=kb&model_name=document&field_name=kb&term="
    )
    assert response.status_code == 200
    assert {r["text"] for r in response.json()["results"]} == {"beta/handbook", "beta/policies"}
    failures: list[str] = []
    _check_autocomplete(world, client, admin.site._registry[Document], failures)
    assert not failures


def test_the_document_list_offers_only_the_users_knowledge_bases(world: World) -> None:
    """Issue 14 item 6, as reported: the "By kb" filter listed every tenant's knowledge bases."""
    response = world.client("carol").get("/admin/kb/document/")
    changelist = response.context["cl"]
    (by_kb,) = [s for s in changelist.filter_specs if s.title == "knowledge base"]
    choices = [str(c["display"]) for c in by_kb.choices(changelist)]
    assert choices[0] == "All" and sorted(choices[1:]) == ["beta/handbook", "beta/policies"]
    assert MARK_A not in response.content.decode()
    upload = world.client("carol").get("/admin/kb/document/upload/")
    offered = {str(kb) for kb in upload.context["form"].fields["kb"].queryset}
    assert offered == {"beta/handbook", "beta/policies"}


def test_an_action_on_another_tenants_rows_changes_nothing(world: World) -> None:
    theirs = ApiKey.objects.get(name=f"{MARK_A}-bot")
    ours = ApiKey.objects.get(name="beta-bot")
    response = world.client("ian").post(
        "/admin/retrieval/apikey/",
        {"action": "revoke", "_selected_action": [theirs.pk, ours.pk]},
    )
    assert response.status_code == 302
    theirs.refresh_from_db()
    ours.refresh_from_db()
    assert theirs.revoked_at is None and ours.revoked_at is not None


def test_a_form_refuses_another_tenants_choice(world: World) -> None:
    """The choices are the queryset the form validates against: a foreign id posted anyway is
    an invalid choice, not a document in another tenant's knowledge base."""
    theirs = KnowledgeBase.objects.get(slug=f"{MARK_A}-hb")
    response = world.client("carol").post(
        "/admin/kb/document/add/", {"kb": theirs.pk, "key": "x", "title": "x"}
    )
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert not theirs.documents.filter(key="x").exists()
