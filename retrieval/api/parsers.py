"""How the API reads what a client sends, for every view: one JSON parser, one multipart
parser, and one check of the text in URLs and query strings (`request_text_problem`, applied
by `retrieval.api.errors.ApiErrorsMiddleware` before any view runs).

The rule is the same everywhere: a client's text must be UTF-8 that PostgreSQL can store, so
no NUL character and no unpaired surrogate (JSON's `"\\ud800"` escape decodes to one); a JSON
body is at most MAX_JSON_BYTES, nests at most MAX_JSON_DEPTH arrays and objects, and holds no
number beyond a double's range (`1e400` would read as infinity). Anything
else is refused with a 4xx in the API's error shape before a serializer, a selector or the
database sees it.
"""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from django.http import HttpRequest, QueryDict
from django.utils.http import parse_header_parameters
from rest_framework import parsers
from rest_framework.exceptions import APIException, ParseError, UnsupportedMediaType

MAX_JSON_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 32


class RequestTooLarge(APIException):
    status_code = 413
    default_code = "request_too_large"
    default_detail = f"A JSON body is at most {MAX_JSON_BYTES} bytes."


def text_problem(value: str) -> str | None:
    """What in `value` UTF-8 or PostgreSQL cannot hold, or None."""
    if "\x00" in value:
        return "a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "an unpaired surrogate"
    return None


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{json.dumps(key)}]"


def json_problem(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Where a decoded JSON value breaks the rule, or None. Iterative, so no depth of nesting
    can exhaust the stack; a key is named in the answer only once it is known to be clean."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem:
                return f"{path} holds {problem}."
        elif isinstance(item, float) and not math.isfinite(item):
            return f"{path} is a number beyond the range of a double (±1.8e308)."
        elif isinstance(item, dict | list):
            if depth >= max_depth:
                return f"{path} nests deeper than {max_depth} levels."
            if isinstance(item, dict):
                for key, child in item.items():
                    problem = text_problem(key)
                    if problem:
                        return f"A key of {path} holds {problem}."
                    stack.append((child, _child(path, key), depth + 1))
            else:
                stack.extend((child, _child(path, i), depth + 1) for i, child in enumerate(item))
    return None


def _require_utf8(parser_context: Mapping[str, Any] | None, media_type: str | None) -> None:
    """JSON is UTF-8 (RFC 8259); a form is read in the charset the client names, so any other
    one (`raw_unicode_escape` decodes `\\ud800` to a surrogate), or one unknown, is refused."""
    _, params = parse_header_parameters(media_type or "")
    for encoding in (params.get("charset"), (parser_context or {}).get("encoding")):
        if not encoding:
            continue
        try:
            utf8 = codecs.lookup(encoding).name == "utf-8"
        except LookupError:
            utf8 = False
        if not utf8:
            raise UnsupportedMediaType(
                media_type or "", detail=f"Send UTF-8; charset {encoding!r} is not accepted."
            )


def _refuse(problem: str | None) -> None:
    if problem:
        raise ParseError(f"Invalid text: {problem}")


class JSONParser(parsers.JSONParser):
    """The API's JSON: bounded in size and depth, strict UTF-8, no NaN or Infinity (neither
    spelt so nor out of range), and every key and string checked by `json_problem`."""

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        _require_utf8(parser_context, media_type)
        raw = stream.read(MAX_JSON_BYTES + 1) if stream is not None else b""
        if len(raw) > MAX_JSON_BYTES:
            raise RequestTooLarge()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - the body is not UTF-8 ({exc.reason}).") from exc
        try:
            value = json.loads(text, parse_constant=_no_constant)
        except RecursionError as exc:
            raise ParseError(f"JSON nests deeper than {MAX_JSON_DEPTH} levels.") from exc
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        problem = json_problem(value)
        if problem:
            raise ParseError(f"Invalid JSON: {problem}")
        return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _form_problem(data: QueryDict, files: Iterable[tuple[str, str]]) -> str | None:
    """Where a form's text breaks the rule: a field name, a field's value, a file's name."""
    for name, values in data.lists():
        problem = text_problem(name)
        if problem:
            return f"a form field's name holds {problem}."
        for value in values:
            problem = text_problem(value)
            if problem:
                return f"the form field {name!r} holds {problem}."
    for name, file_name in files:
        problem = text_problem(name) or text_problem(file_name)
        if problem:
            return f"a file's name or field name holds {problem}."
    return None


class MultiPartParser(parsers.MultiPartParser):
    """Django's multipart parser in UTF-8 only, with every field name, value and file name
    checked like JSON text."""

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        _require_utf8(parser_context, media_type)
        result = super().parse(stream, media_type, parser_context)
        files = [(name, f.name or "") for name, fs in result.files.lists() for f in fs]
        _refuse(_form_problem(result.data, files))
        return result


def request_text_problem(request: HttpRequest) -> str | None:
    """What in the request's path or query string breaks the rule, or None. (Django re-escapes
    invalid UTF-8 in a path, but `%00` decodes to NUL, and a query string is decoded in the
    request's charset, which the client names.)"""
    problem = text_problem(request.path)
    if problem:
        return f"the path holds {problem}."
    try:
        query = request.GET
    except Exception:  # a charset that cannot decode text (a codec of bytes)
        return "the query string cannot be decoded."
    for key, values in query.lists():
        for text in (key, *values):
            problem = text_problem(text)
            if problem:
                return f"the query string holds {problem}."
    return None
