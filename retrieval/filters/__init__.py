"""Canon's one filter language (`language`), the shapes other tools send that map onto it
(`shapes`: OpenAI vector-store filters, Dify's metadata_condition), and its SQL (`sql`)."""

from retrieval.filters.language import (
    MAX_CONDITIONS,
    MAX_DEPTH,
    OPERATORS,
    All,
    AnyOf,
    Condition,
    Filter,
    FilterError,
    Not,
    parse_filter,
)
from retrieval.filters.sql import filter_sql

__all__ = [
    "MAX_CONDITIONS",
    "MAX_DEPTH",
    "OPERATORS",
    "All",
    "AnyOf",
    "Condition",
    "Filter",
    "FilterError",
    "Not",
    "filter_sql",
    "parse_filter",
]
