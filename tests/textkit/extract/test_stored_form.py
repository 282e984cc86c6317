"""The stored form of an extraction (`Extracted`): it round-trips through JSON, and JSON that is
not its own is refused."""

from __future__ import annotations

import pytest

from textkit.extract import CODE, HEADING, TABLE, Block, Extracted


def test_extracted_round_trips_through_json() -> None:
    extracted = Extracted(
        title="Guide — 指南",
        blocks=[Block(HEADING, "Intro", level=1), Block(CODE, "  x = 1"), Block(TABLE, "a\tb")],
    )
    assert Extracted.from_json(extracted.to_json()) == extracted
    with pytest.raises(ValueError):
        Extracted.from_json(b'{"title": "not ours"}')
