"""What every check of the reconciler shares: a finding, a repair's signature, the levels a
pass works at and the figures of the pass in progress (the pass is a singleton)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection

EVENT, DOCUMENT, SHARD = "event", "document", "shard"
# Per-level figures of the pass in progress (the pass is a singleton).
pass_figures: dict[str, dict[str, Any]] = {EVENT: {}, DOCUMENT: {}, SHARD: {}}


BATCH = 200


MAX_REPAIRS = 3


@dataclass(frozen=True)
class Finding:
    kind: str
    subject_type: str
    subject_id: int
    kb_id: int | None
    detail: str
    document_id: int | None = None  # when known: one finding per document and pass


Repair = Callable[[Finding], str]


def fetch_rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
