"""The filter shapes of other tools mapped onto Canon's language (`retrieval.filters.shapes`)."""

from __future__ import annotations

from typing import Any

import pytest

from kb.metadata import FieldSpec
from retrieval.filters import FilterError, parse_filter
from retrieval.filters.shapes import from_dify, from_openai

FIELDS = {
    "category": FieldSpec("category", "string"),
    "year": FieldSpec("year", "number"),
    "tags": FieldSpec("tags", "string_list"),
}


def test_openai_comparisons_and_compounds() -> None:
    given = {
        "type": "and",
        "filters": [
            {"type": "eq", "key": "category", "value": "blog"},
            {"type": "or", "filters": [{"type": "gte", "key": "year", "value": 2024}]},
        ],
    }
    assert from_openai(given) == {
        "and": [
            {"field": "category", "op": "eq", "value": "blog"},
            {"or": [{"field": "year", "op": "gte", "value": 2024}]},
        ]
    }
    parse_filter(from_openai(given), FIELDS)  # and it checks against the fields


@pytest.mark.parametrize(
    ("given", "place"),
    [
        ({"type": "like", "key": "category", "value": "b"}, "filters.type"),
        ({"type": "and", "filters": []}, "filters.filters"),
        ({"type": "eq", "key": "category"}, "filters"),
        ([1, 2], "filters"),
    ],
)
def test_openai_mistakes_name_the_place(given: Any, place: str) -> None:
    with pytest.raises(FilterError) as caught:
        from_openai(given)
    assert caught.value.place == place


def test_dify_conditions() -> None:
    given = {
        "logical_operator": "or",
        "conditions": [
            {"name": ["category"], "comparison_operator": "is", "value": "blog"},
            {"name": ["tags"], "comparison_operator": "not contains", "value": "draft"},
            {"name": ["year"], "comparison_operator": "≥", "value": 2024},
            {"name": ["category", "tags"], "comparison_operator": "not empty"},
            {"name": ["category"], "comparison_operator": "start with", "value": "bl"},
        ],
    }
    assert from_dify(given) == {
        "or": [
            {"field": "category", "op": "eq", "value": "blog"},
            {
                "and": [
                    {"field": "tags", "op": "exists", "value": True},
                    {"not": {"field": "tags", "op": "contains", "value": "draft"}},
                ]
            },
            {"field": "year", "op": "gte", "value": 2024},
            {
                "or": [
                    {"field": "category", "op": "exists", "value": True},
                    {"field": "tags", "op": "exists", "value": True},
                ]
            },
            {"field": "category", "op": "starts_with", "value": "bl"},
        ]
    }
    parse_filter(from_dify(given), FIELDS)


def test_dify_mistakes_name_the_place() -> None:
    with pytest.raises(FilterError) as caught:
        from_dify({"conditions": [{"name": ["year"], "comparison_operator": "~"}]})
    assert caught.value.place == "metadata_condition.conditions[0].comparison_operator"
    with pytest.raises(FilterError) as caught:
        from_dify({"logical_operator": "xor", "conditions": []})
    assert caught.value.place == "metadata_condition.logical_operator"


def test_dify_s_in_takes_comma_separated_text_as_dify_splits_it() -> None:
    given = {
        "conditions": [
            {"name": ["category"], "comparison_operator": "in", "value": "blog, news ,"},
            {"name": ["category"], "comparison_operator": "not in", "value": ["x", "y"]},
        ]
    }
    assert from_dify(given)["and"][0] == {
        "field": "category",
        "op": "in",
        "value": ["blog", "news"],
    }
    parse_filter(from_dify(given), FIELDS)
