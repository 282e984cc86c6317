"""The compatibility doors' errors in their own shapes, for what their views do not answer
themselves: an unknown path under their prefixes, a wrong method, a path or query string with
text PostgreSQL cannot hold, a server error. `retrieval.api.errors.ApiErrorsMiddleware` makes
every error under /api/ JSON in Canon's shape ({"error": code, "detail": message}); this
middleware, outside it, words those of /api/dify/ as Dify's {"error_code", "error_msg"} and those
of /api/openai/ as OpenAI's {"error": {"message", "type", "param", "code"}}. `error_body` is the
one wording, also of what the web server refuses before Django sees it (config/gunicorn.conf.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from retrieval.compat.dify import INVALID_REQUEST, RATE_LIMITED, UNAVAILABLE

DIFY_PREFIX = "/api/dify/"
OPENAI_PREFIX = "/api/openai/"
_KEPT_HEADERS = ("Allow", "Retry-After", "WWW-Authenticate")


def _dify(status: int, code: str, message: str) -> dict[str, Any]:
    if status == 429:
        error_code = RATE_LIMITED
    elif status >= 500:
        error_code = UNAVAILABLE
    else:
        error_code = INVALID_REQUEST
    return {"error_code": error_code, "error_msg": message}


def _openai(status: int, code: str, message: str) -> dict[str, Any]:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    # OpenAI's 404 carries no code (the status says it).
    tag = None if status == 404 else code
    return {"error": {"message": message, "type": kind, "param": None, "code": tag}}


def _canon(status: int, code: str, message: str) -> dict[str, Any]:
    return {"error": code, "detail": message}


def _shape(path: str) -> Callable[[int, str, str], dict[str, Any]] | None:
    if path.startswith(DIFY_PREFIX):
        return _dify
    if path.startswith(OPENAI_PREFIX):
        return _openai
    return None


def error_body(path: str | None, status: int, code: str, message: str) -> dict[str, Any]:
    """An error's JSON body as the door of `path` words it: Dify's, OpenAI's, or Canon's (the
    rest of /api/, and a request whose path is not known)."""
    shape = _shape(path) if path is not None else None
    return (shape or _canon)(status, code, message)


def _canon_error(response: HttpResponse) -> tuple[str, str] | None:
    """(code, message) of an error body in Canon's shape; None for any other body."""
    if not str(response.get("Content-Type", "")).startswith("application/json"):
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    if not isinstance(body, dict) or set(body) != {"error", "detail"}:
        return None
    if not isinstance(body["error"], str):
        return None
    detail = body["detail"]
    return body["error"], detail if isinstance(detail, str) else json.dumps(detail)


class CompatErrorsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code < 400:
            return response
        shape = _shape(request.path)
        if shape is None:
            return response
        error = _canon_error(response)
        if error is None:
            return response
        replacement = JsonResponse(shape(response.status_code, *error), status=response.status_code)
        for header in _KEPT_HEADERS:
            if header in response:
                replacement[header] = response[header]
        return replacement
