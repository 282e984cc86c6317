"""The extended statistics that keep the visibility rule's estimate honest (kb migration 0021):
PostgreSQL knows a chunk's and a pointer's knowledge base follow from their index version, so a
knowledge base's own chunks are not estimated as a sliver of them (docs/BENCHMARKS.md,
"Cross-KB fusion quality": 318 estimated of 23,081, an exact sort instead of the HNSW walk)."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def test_the_version_determines_the_knowledge_base_in_the_planners_statistics() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT s.stxname, c.relname, s.stxkind::text[],
                   array(SELECT a.attname FROM unnest(s.stxkeys) k
                         JOIN pg_attribute a ON a.attrelid = s.stxrelid AND a.attnum = k
                         ORDER BY a.attname)
            FROM pg_statistic_ext s JOIN pg_class c ON c.oid = s.stxrelid
            WHERE c.relname IN ('kb_chunk', 'kb_publication')
            ORDER BY c.relname
            """
        )
        rows = cursor.fetchall()

    assert rows == [
        ("kb_chunk_version_kb", "kb_chunk", ["f"], ["index_version_id", "kb_id"]),
        ("kb_publication_version_kb", "kb_publication", ["f"], ["index_version_id", "kb_id"]),
    ]
