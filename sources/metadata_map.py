"""A source's own fields (S3 object tags, user metadata, front matter, HTML meta) mapped onto
its knowledge base's declared metadata fields (`Source.metadata_map`: {source field: kb
field}). Values arrive as the source has them (tags are strings), so each is coerced to the
field's type first; a value that still does not fit is left out and reported, never fatal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kb.metadata import (
    BOOLEAN,
    NUMBER,
    STRING,
    STRING_LIST,
    FieldSpec,
    MetadataInvalid,
    normalise_value,
)

_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def _coerced(kind: str, value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if kind == NUMBER:
            try:
                number = float(text)
            except ValueError:
                return value
            return int(number) if number.is_integer() and "." not in text else number
        if kind == BOOLEAN and text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        if kind == STRING_LIST:
            return [part.strip() for part in text.split(",") if part.strip()]
    if kind == STRING and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def mapped_metadata(
    found: Mapping[str, Any], mapping: Mapping[str, str], specs: Mapping[str, FieldSpec]
) -> tuple[dict[str, Any], list[str]]:
    """The knowledge-base fields `found` supplies through `mapping`, in their stored form, and a
    note per value left out (an undeclared field, a value that does not fit its type)."""
    values: dict[str, Any] = {}
    notes: list[str] = []
    for source_field, kb_field in mapping.items():
        if source_field not in found:
            continue
        spec = specs.get(kb_field)
        if spec is None or spec.built_in:
            notes.append(f'"{kb_field}" is not a metadata field of this knowledge base')
            continue
        try:
            values[kb_field] = normalise_value(
                spec.type, _coerced(spec.type, found[source_field]), field=kb_field
            )
        except MetadataInvalid as exc:
            notes.append(str(exc))
    return values, notes
