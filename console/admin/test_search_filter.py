"""The metadata filter of test search: the API's filter language (`retrieval.filters`), offered
two ways on one form.

- A condition built from three inputs: a field of the knowledge base (its declared metadata
  fields, then the built-in ones, each with its type), an operator in words, and a value typed
  as text and read by the field's type ("2024" a number, "yes" true, "a, b" a list for
  *is one of*).
- A filter in the API's JSON, for anything more (and, or, not, nesting), checked with the same
  rules and the same errors as `POST /api/v1/search`'s `filter`, naming the place
  ("filter.and[1].value: ...").

Both given: the two must hold (and). The page shows the filter it applied in the API's JSON, so
what was tried here can be sent to the API as it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django import forms
from django.utils.translation import gettext, gettext_lazy, pgettext_lazy

from kb.metadata import BOOLEAN, DATE, NUMBER, STRING_LIST, FieldSpec
from retrieval.api.parsers import json_problem
from retrieval.api.serializers import MAX_FILTER_CHARS
from retrieval.filters import OPERATORS, All, Filter, FilterError, parse_filter
from retrieval.filters.language import allowed_operators

# How the builder names each operator (the API's name follows in the choice).
OPERATOR_WORDS = {
    "eq": pgettext_lazy("filter operator", "is"),
    "ne": pgettext_lazy("filter operator", "is not"),
    "gt": pgettext_lazy("filter operator", "is more than / after"),
    "gte": pgettext_lazy("filter operator", "is at least / on or after"),
    "lt": pgettext_lazy("filter operator", "is less than / before"),
    "lte": pgettext_lazy("filter operator", "is at most / on or before"),
    "in": pgettext_lazy("filter operator", "is one of"),
    "nin": pgettext_lazy("filter operator", "is none of"),
    "contains": pgettext_lazy("filter operator", "contains"),
    "starts_with": pgettext_lazy("filter operator", "starts with"),
    "ends_with": pgettext_lazy("filter operator", "ends with"),
    "exists": pgettext_lazy("filter operator", "has a value (yes / no)"),
}
TYPE_WORDS = {
    "string": pgettext_lazy("filter type", "text"),
    "number": pgettext_lazy("filter type", "number"),
    "date": pgettext_lazy("filter type", "date"),
    "boolean": pgettext_lazy("filter type", "yes / no"),
    "string_list": pgettext_lazy("filter type", "list of text"),
}
# What the value input expects, per type (the page's script shows it as the placeholder).
VALUE_HINTS = {
    "string": pgettext_lazy("filter type", "text"),
    "number": gettext_lazy("a number, e.g. 2024"),
    "date": "YYYY-MM-DD",
    "boolean": gettext_lazy("yes or no"),
    "string_list": pgettext_lazy("filter type", "text"),
}
LIST_HINT = gettext_lazy("comma-separated: a, b, c")
# Yes and no as a person types them, in English or Chinese.
_YES = {"yes", "true", "1", "y", "是"}
_NO = {"no", "false", "0", "n", "否"}
# The builder's one condition is checked (and its errors placed) under this name.
BUILT = "condition"


def add_filter_inputs(form: forms.Form, specs: Mapping[str, FieldSpec]) -> None:
    """Add the builder's three inputs and the JSON box to `form`, for a knowledge base whose
    filterable fields are `specs` (`kb.metadata.field_specs`): declared fields first."""
    ordered = sorted(specs.values(), key=lambda s: (s.built_in, s.name))
    form.fields["where_field"] = forms.ChoiceField(
        required=False,
        label=gettext("Filter"),
        choices=[("", gettext("— no condition —"))]
        + [
            (
                s.name,
                (
                    gettext("%(name)s (%(type)s, built-in)")
                    if s.built_in
                    else gettext("%(name)s (%(type)s)")
                )
                % {"name": s.name, "type": TYPE_WORDS.get(s.type, s.type)},
            )
            for s in ordered
        ],
    )
    form.fields["where_field"].widget.attrs["data-types"] = json.dumps(
        {s.name: s.type for s in ordered}
    )
    form.fields["where_op"] = forms.ChoiceField(
        required=False,
        label=gettext("Operator"),
        choices=[(op, f"{OPERATOR_WORDS[op]} ({op})") for op in OPERATORS],
        initial="eq",
    )
    form.fields["where_op"].widget.attrs["data-allowed"] = json.dumps(
        {kind: sorted(allowed_operators(kind)) for kind in TYPE_WORDS}
    )
    form.fields["where_value"] = forms.CharField(
        required=False, label=gettext("Value"), max_length=2000, strip=True
    )
    form.fields["where_value"].widget.attrs["data-hints"] = json.dumps(
        {**{kind: str(hint) for kind, hint in VALUE_HINTS.items()}, "list": str(LIST_HINT)}
    )
    form.fields["filter"] = forms.CharField(
        required=False,
        label=gettext("Filter (JSON)"),
        max_length=MAX_FILTER_CHARS,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60, "class": "vLargeTextField"}),
        help_text=gettext(
            "For anything the condition above cannot say: the API's filter, e.g. %(example)s. "
            "With a condition above, both must hold."
        )
        % {
            "example": '{"or": [{"field": "year", "op": "gte", "value": 2024}, {"not": '
            '{"field": "tags", "op": "contains", "value": "draft"}}]}'
        },
    )


@dataclass(frozen=True)
class AppliedFilter:
    """The checked filter search applies, and the same in the API's JSON."""

    tree: Filter
    api_json: str


def checked_filter(form: forms.Form, specs: Mapping[str, FieldSpec]) -> AppliedFilter | None:
    """The filter `form`'s cleaned inputs ask for, checked against `specs`; None when none is
    asked or when a part is refused (each refusal is a form error on its input, naming the
    place for the JSON box as the API does)."""
    data = form.cleaned_data
    parts: list[tuple[Any, Filter]] = []
    condition = _built_condition(form, specs)
    if condition is not None:
        try:
            parts.append((condition, parse_filter(condition, specs, place=BUILT)))
        except FilterError as exc:
            form.add_error(_builder_input(exc.place), exc.message)
    text = (data.get("filter") or "").strip()
    if text:
        raw = _json_filter(form, text)
        if raw is not None:
            try:
                parts.append((raw, parse_filter(raw, specs)))
            except FilterError as exc:
                form.add_error("filter", str(exc))
    if not parts or form.errors:
        return None
    if len(parts) == 1:
        raw, tree = parts[0]
    else:
        raw, tree = {"and": [p[0] for p in parts]}, All(tuple(p[1] for p in parts))
    return AppliedFilter(tree, json.dumps(raw, ensure_ascii=False))


def _built_condition(form: forms.Form, specs: Mapping[str, FieldSpec]) -> dict[str, Any] | None:
    """The builder's condition in the API's shape, its value read by the field's type; None
    when no field is chosen. A value that cannot be read as its type is passed as typed, so
    the filter language refuses it in its own words."""
    data = form.cleaned_data
    name, op, text = data.get("where_field"), data.get("where_op") or "eq", data.get("where_value")
    if not name:
        if text:
            form.add_error("where_field", gettext("Choose the field the value is for."))
        return None
    spec = specs[name]  # a ChoiceField: only the knowledge base's fields get here
    if op == "exists":
        return {"field": name, "op": op, "value": _yes_no(text or "yes")}
    if not text:
        form.add_error("where_value", gettext("Give a value to compare with."))
        return None
    single = "string" if spec.type == STRING_LIST else spec.type
    if op in ("in", "nin") or (spec.type == STRING_LIST and op == "eq"):
        value: Any = [_typed(single, item.strip()) for item in text.split(",") if item.strip()]
    elif op in ("contains", "starts_with", "ends_with"):
        value = text
    else:
        value = _typed(single, text)
    return {"field": name, "op": op, "value": value}


def _typed(kind: str, text: str) -> Any:
    if kind == NUMBER:
        try:
            number = float(text)
        except ValueError:
            return text
        return int(number) if number.is_integer() and abs(number) < 2**53 else number
    if kind == BOOLEAN:
        return _yes_no(text)
    if kind == DATE:
        return text
    return text


def _yes_no(text: str) -> Any:
    word = text.strip().lower()
    if word in _YES:
        return True
    if word in _NO:
        return False
    return text


def _builder_input(place: str) -> str:
    """The builder's input a FilterError's place ("condition.value[1]") points at."""
    tail = place.removeprefix(BUILT).lstrip(".")
    if tail.startswith("field"):
        return "where_field"
    if tail.startswith("op"):
        return "where_op"
    return "where_value"


def _json_filter(form: forms.Form, text: str) -> Any:
    """The JSON box's value, or None with the reason on the box: not JSON (with where), NaN or
    Infinity, text PostgreSQL cannot hold, or nesting past what the parser takes."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        form.add_error("filter", gettext("filter: nests too deep to read."))
        return None
    except ValueError as exc:
        form.add_error("filter", gettext("filter: not valid JSON (%(why)s).") % {"why": exc})
        return None
    problem = json_problem(value)
    if problem:
        form.add_error("filter", problem.replace("$", "filter", 1))
        return None
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
