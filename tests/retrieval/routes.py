"""Every operation the URL resolver serves under /api/, found by walking it, so that a test over
"every API path" covers a view added tomorrow without being told about it."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

METHODS = ("get", "post", "put", "patch", "delete")
PARAM = re.compile(r"<(?:(?P<converter>\w+):)?(?P<name>\w+)>")


@dataclass(frozen=True)
class Operation:
    method: str  # lower case
    route: str  # e.g. "/api/v1/kbs/<str:kb>/documents/"
    view: Any  # the view class
    name: str | None

    @property
    def params(self) -> dict[str, str]:
        """Parameter name -> converter."""
        return {m["name"]: m["converter"] or "str" for m in PARAM.finditer(self.route)}

    @property
    def openapi_path(self) -> str:
        """The route as the OpenAPI schema writes it: /api/v1/kbs/{kb}/documents/."""
        return PARAM.sub(lambda m: "{" + m["name"] + "}", self.route)

    @property
    def handler(self) -> Any:
        return getattr(self.view, self.method)

    def path(self, values: Mapping[str, object]) -> str:
        missing = set(self.params) - set(values)
        assert not missing, f"{self}: give the test a value for {sorted(missing)}"
        return PARAM.sub(lambda m: str(values[m["name"]]), self.route)

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.route}"


def _patterns(patterns: list[Any], prefix: str) -> Iterator[tuple[str, URLPattern]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _patterns(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern), pattern


def api_operations() -> list[Operation]:
    """(method, route) for every class-based view under /api/ (schema and docs included)."""
    operations = []
    for route, pattern in _patterns(get_resolver().url_patterns, "/"):
        if not route.startswith("/api/"):
            continue
        view = getattr(pattern.callback, "view_class", None)
        assert view is not None, f"{route}: not a class-based view; teach tests/routes.py"
        for method in METHODS:
            if hasattr(view, method):
                operations.append(Operation(method, route, view, pattern.name))
    assert operations, "the resolver serves nothing under /api/"
    return operations


def call(client: Client, operation: Operation, path: str, **kwargs: Any) -> Any:
    return client.generic(operation.method.upper(), path, **kwargs)


def error_of(path: str, body: Any) -> tuple[str | None, str]:
    """(code, message) of an error body, asserting the shape of the door at `path`: Canon's
    {"error", "detail"}; under /api/dify/ Dify's {"error_code", "error_msg"} (no code in Canon's
    words: None); under /api/openai/ OpenAI's {"error": {"message", "type", "param", "code"}}
    (`retrieval.compat`)."""
    if path.startswith("/api/dify/"):
        assert set(body) == {"error_code", "error_msg"}, body
        return None, str(body["error_msg"])
    if path.startswith("/api/openai/"):
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
        return body["error"]["code"], str(body["error"]["message"])
    assert set(body) == {"error", "detail"}, body
    return body["error"], str(body["detail"])
