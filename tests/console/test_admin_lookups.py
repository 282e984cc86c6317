"""Every admin URL that names an object answers an id it may not show the way it answers an id
that does not exist: malformed ids, another tenant's ids and restricted documents' ids alike.
Never a 500, never a page with another tenant's (or a restricted document's) content.

The URLs come from the resolver, so a view added later is walked without editing this test; a
URL parameter this test does not know fails it until it is taught what the parameter names."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RegexPattern, RoutePattern

from evaluation.models import Calibration, EvaluationRun
from kb.models import Build, Document, IndexVersion, KnowledgeBase, MetadataField
from tests.console.admin_world import MARK_A, MARK_HR, World, build_world
from work.models import AuditEvent

pytestmark = pytest.mark.django_db

# What each URL parameter names, besides the object id of the model admin it belongs to.
PARAMETER_MODELS: dict[str, type[Model]] = {
    "build_id": Build,
    "version_id": IndexVersion,
    "event_id": AuditEvent,
    "content_type_id": ContentType,
    "field_id": MetadataField,
    "kb_id": KnowledgeBase,  # a knowledge base's page of another admin (evaluation's Quality)
    "other_id": EvaluationRun,  # the run a comparison puts beside the page's
    "calibration_id": Calibration,  # a knowledge base's fusion calibration (its page, Adopt…)
}
MALFORMED = ["abc", "1%20OR%201=1", "-1", "0", "99999999999999999999", "1.5", "%00", "1/2"]
NO_POST = {"logout", "password_change"}  # they would end or change the session


@pytest.fixture
def world(db: None) -> World:
    return build_world()


@dataclass(frozen=True)
class Route:
    name: str
    route: str  # "kb/document/<path:object_id>/approve/<int:build_id>/"
    model: type[Model] | None  # the model admin's, for `object_id`

    def params(self) -> list[tuple[str, str]]:
        return re.findall(r"<(?:(\w+):)?(\w+)>", self.route)  # (converter, name)

    def url(self, values: dict[str, str]) -> str:
        def fill(match: re.Match[str]) -> str:
            return values[match.group(1)]

        return "/admin/" + re.sub(r"<(?:\w+:)?(\w+)>", fill, self.route)


def _admin_resolver() -> URLResolver:
    for entry in get_resolver().url_patterns:
        if isinstance(entry, URLResolver) and entry.app_name == "admin":
            return entry
    raise AssertionError("no admin site in the root URLconf")


def _routes(patterns: list[Any], prefix: str, model: type[Model] | None) -> Iterator[Route]:
    by_prefix = {f"{m._meta.app_label}/{m._meta.model_name}/": m for m in admin.site._registry}
    for entry in patterns:
        pattern = entry.pattern
        if isinstance(pattern, RegexPattern):
            groups = pattern.regex.groupindex
            if "app_label" in groups:  # the app index: one URL per app
                labels = {m._meta.app_label for m in admin.site._registry}
                for label in labels:
                    yield Route(f"app_list:{label}", f"{prefix}{label}/", None)
                continue
            if "url" in groups:  # the final catch-all
                yield Route("catch_all", f"{prefix}abc/def/", None)
                continue
            raise AssertionError(f"teach this test the regex URL {pattern.regex.pattern!r}")
        assert isinstance(pattern, RoutePattern)
        route = prefix + str(pattern)
        if isinstance(entry, URLResolver):
            yield from _routes(entry.url_patterns, route, by_prefix.get(route, model))
        else:
            assert isinstance(entry, URLPattern)
            yield Route(entry.name or route, route, model)


def admin_routes() -> list[Route]:
    return list(_routes(_admin_resolver().url_patterns, "", None))


def _model_of(route: Route, name: str) -> type[Model] | None:
    if name in ("object_id", "pk", "id"):  # Django says <object_id>, auth's password page <id>
        return Document if route.name == "view_on_site" else route.model
    if name in PARAMETER_MODELS:
        return PARAMETER_MODELS[name]
    if name == "action":
        return None
    raise AssertionError(f"{route.route}: teach this test what <{name}> names")


def _own(world: World, model: type[Model] | None, name: str) -> str:
    """A valid value the users of tenant B may use."""
    if name == "action":
        return "retry"
    if model is ContentType:
        return str(ContentType.objects.get_for_model(Document).pk)
    own = sorted(world.ids_b.get(model, set())) if model else []
    return str(own[0]) if own else _nonexistent(model)


def _nonexistent(model: type[Model] | None) -> str:
    if model is None:
        return "999999"
    ids = [i for i in model._default_manager.values_list("pk", flat=True) if isinstance(i, int)]
    return str(max(ids, default=0) + 100_000)


def _variants(
    world: World,
    model: type[Model] | None,
    converter: str,
    name: str,
    hr: bool,
    malformed_share: tuple[int, int] = (0, 1),
) -> list[str]:
    """Ids the user may not see: malformed, another tenant's, and (without hr) restricted. An
    int converter routes only digits and only a path converter routes a slash (anything else
    is another URL, walked on its own). `malformed_share` (i, n): the i-th of n shares of the
    malformed ids, so that n users walking every URL try each malformed id once between them
    (an id that parses to nothing is no one's; another tenant's and a restricted one are
    tried by every user)."""
    if name == "action":
        return ["abc", "1"]
    hidden = set(world.ids_a.get(model, set())) if model else set()
    if not hr and model is not None:
        hidden |= world.ids_hr.get(model, set())
    share, shares = malformed_share
    malformed = [
        v
        for v in MALFORMED[share::shares]
        if (converter != "int" or v.isdigit()) and (converter == "path" or "/" not in v)
    ]
    return malformed + [str(i) for i in sorted(hidden)[:4]]


def _answer(response: Any, value: str) -> tuple[int, str]:
    """What an answer tells: its status and where it sends the user (the id itself aside)."""
    location = unquote(response.get("Location", ""))
    return response.status_code, location.replace(f"/{unquote(value)}/", "/<id>/")


def leaks(body: str, *, hr: bool) -> str | None:
    """What a page shows that its user may not see: tenant A's data, or (for a user outside
    hr) the hr document."""
    body = body.lower()
    if MARK_A in body:
        return "tenant A's data"
    if not hr and MARK_HR in body:
        return "a document of a group the user does not hold"
    return None


USERS = ["carol", "ian", "harry"]


@pytest.mark.parametrize("user", USERS)
def test_every_admin_url_answers_ids_it_may_not_show_like_missing_ones(
    world: World, user: str
) -> None:
    hr = user == "harry"
    # the malformed ids shared among the users: each tried once per URL (the walk's time)
    share = (USERS.index(user), len(USERS))
    client = world.client(user)
    client.raise_request_exception = False
    routes = [r for r in admin_routes() if r.params()]
    assert {"kb_document_approve", "kb_indexversion_new", "ingestion_anomaly"} <= {
        r.name for r in routes
    }, "the walk must reach the custom views"
    failures: list[str] = []

    def call(method: str, url: str) -> Any:
        response = getattr(client, method)(url, {})
        if response.status_code >= 500:
            failures.append(f"{method.upper()} {url}: {response.status_code}")
        elif response.status_code == 200:
            leak = leaks(response.content.decode(errors="replace"), hr=hr)
            if leak:
                failures.append(f"{method.upper()} {url} shows {leak}")
        return response

    for route in routes:
        params = route.params()
        models = {name: _model_of(route, name) for _, name in params}
        base = {name: _own(world, models[name], name) for name in models}
        methods = ["get"] if route.name in NO_POST else ["get", "post"]
        for converter, name in params:
            for method in methods:
                absent = _nonexistent(models[name]) if name != "action" else "nothing"
                missing = _answer(call(method, route.url({**base, name: absent})), absent)
                for value in _variants(world, models[name], converter, name, hr, share):
                    url = route.url({**base, name: value})
                    answer = _answer(call(method, url), value)
                    if answer != missing:
                        failures.append(
                            f"{method.upper()} {url}: {answer}, but a missing id gets {missing}"
                        )
    assert not failures, "\n".join(failures)


def test_the_issue_urls_are_not_server_errors(world: World) -> None:
    """Issue 14 item 5, as reported: non-numeric ids were ValueErrors (500)."""
    client = world.client("ian")
    kb = world.kb_b.pk
    for url in [
        "/admin/kb/document/abc/change/",
        "/admin/kb/document/abc/progress/",
        "/admin/kb/document/abc/approve/1/",
        "/admin/kb/document/abc/soft-delete/",
        "/admin/kb/document/1%20OR%201=1/change/",
        "/admin/kb/knowledgebase/abc/change/",
        "/admin/kb/knowledgebase/abc/index-versions/new/",
        "/admin/kb/knowledgebase/abc/index-versions/rollback/",
    ]:
        response = client.get(url)
        if url.endswith("/change/"):  # Django's own answer: back to the index, "doesn't exist"
            assert (response.status_code, response["Location"]) == (302, "/admin/"), url
        else:
            assert response.status_code == 404, url
    # and the same answers for another tenant's and a nonexistent id
    foreign = Document.objects.get(key=f"{MARK_A}-travel").pk
    for bad in (str(foreign), "999999"):
        assert client.get(f"/admin/kb/document/{bad}/progress/").status_code == 404
        assert client.get(f"/admin/kb/document/{bad}/change/")["Location"] == "/admin/"
    assert client.get(f"/admin/kb/knowledgebase/{kb}/index-versions/new/").status_code == 200


def test_a_user_without_a_tenant_sees_no_object(world: World) -> None:
    loner = User.objects.create_user("loner", password="a-long-test-password", is_staff=True)
    loner.groups.add(*world.users["ian"].groups.all())
    client = Client()
    client.force_login(loner)
    assert client.get(f"/admin/kb/document/{world.open_doc.pk}/progress/").status_code == 404
    assert "vacation" not in client.get("/admin/kb/document/").content.decode()
