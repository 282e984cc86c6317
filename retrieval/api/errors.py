"""Every error under /api/ is JSON in the API's shape, `{"error": code, "detail": message}`,
with DEBUG on or off: unknown paths, wrong methods, a client's bad text, and a server error
(500, logged with its traceback, which the answer never carries).

DRF's views shape their own errors (`retrieval.api.views.exception_handler`). What happens outside
them — URL resolution, Django's exceptions, other middleware, Django's error pages (with DEBUG
on, its technical 404 lists every URL pattern and bypasses `handler404`) — is made JSON here by
`ApiErrorsMiddleware`, the outermost middleware.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import BadRequest as DjangoBadRequest
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.core.signals import got_request_exception
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.log import log_response
from rest_framework.renderers import JSONRenderer

from retrieval.api.parsers import request_text_problem

API_PREFIX = "/api/"


def under_api(path: str) -> bool:
    return path == API_PREFIX[:-1] or path.startswith(API_PREFIX)


CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "request_too_large",
    414: "request_line_too_long",
    415: "unsupported_media_type",
    417: "expectation_failed",
    429: "throttled",
    431: "headers_too_large",
    500: "server_error",
    501: "not_implemented",
    503: "unavailable",
}
SERVER_ERROR = "The server failed to answer this request; the error is logged."


def error_response(status: int, detail: str, code: str | None = None) -> JsonResponse:
    code = code or CODES.get(status, "server_error" if status >= 500 else "error")
    return JsonResponse({"error": code, "detail": detail}, status=status)


def _detail(request: HttpRequest, status: int) -> str:
    if status == 404:
        return f"Nothing at {request.path}."
    if status == 405:
        return f"Method {request.method} is not allowed here."
    if status >= 500:
        return SERVER_ERROR
    return CODES.get(status, "error").replace("_", " ").capitalize() + "."


def _is_json(response: HttpResponse) -> bool:
    return str(response.get("Content-Type", "")).startswith("application/json")


class ApiErrorsMiddleware:
    """Under /api/: refuse a path or query string with text PostgreSQL cannot hold (400);
    answer exceptions that escape a view as JSON (logged and signalled as Django does, so
    error reporting and the test client still see them); and replace any other error page
    with JSON of the same status."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not under_api(request.path):
            return self.get_response(request)
        problem = request_text_problem(request)
        if problem:
            return error_response(400, f"Invalid text: {problem}")
        try:
            response = self.get_response(request)
        except Exception as exc:  # Django's own error page failed (it can: a bad character)
            return self._server_error(request, exc)
        if response.status_code >= 400 and not _is_json(response):
            replacement = error_response(
                response.status_code, _detail(request, response.status_code)
            )
            for header in ("Allow", "Retry-After", "WWW-Authenticate"):
                if header in response:
                    replacement[header] = response[header]
            response = replacement
        return response

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not under_api(request.path):
            return None
        if isinstance(exc, Http404):
            return error_response(404, _detail(request, 404))
        if isinstance(exc, PermissionDenied):
            return error_response(403, "You may not do this.")
        if isinstance(exc, RequestDataTooBig):
            return error_response(413, "The request body is too large.")
        if isinstance(exc, SuspiciousOperation | DjangoBadRequest):
            return error_response(400, "The request was refused.")
        return self._server_error(request, exc)

    @staticmethod
    def _server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
        got_request_exception.send(sender=None, request=request)
        response = error_response(500, SERVER_ERROR)
        log_response(
            "Internal Server Error: %s",
            request.path,
            response=response,
            request=request,
            exception=exc,
        )
        return response


class ApiJSONRenderer(JSONRenderer):
    """DRF's JSON renderer, which escapes non-ASCII instead of failing when a string cannot be
    encoded as UTF-8 (an unpaired surrogate echoed from input that escaped the parsers)."""

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Any = None,
    ) -> bytes:
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            return _AsciiJSONRenderer().render(data, accepted_media_type, renderer_context)


class _AsciiJSONRenderer(JSONRenderer):
    ensure_ascii = True
