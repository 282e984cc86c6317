"""The Quality page's charts (`console.admin.evaluation_charts`) write their dates and numbers as
the page's language writes them (issue 41, item 5): a Chinese page's axis says 2026年5月3日, not
2026-05-03; an English page keeps its ISO dates (the admin's English DATE_FORMAT)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django.utils import translation

from console.admin.evaluation_charts import line_chart
from evaluation.selectors import Point

SERIES = {
    "hybrid": [
        Point(run_id=7, when=datetime(2026, 5, 3, 22, 10, tzinfo=UTC), value=0.5, label="v1"),
        Point(run_id=9, when=datetime(2026, 11, 24, 8, 0, tzinfo=UTC), value=0.875, label="v2"),
    ],
    "keyword": [
        Point(run_id=7, when=datetime(2026, 5, 3, 22, 10, tzinfo=UTC), value=0.25, label="v1"),
    ],
}


def chart(language: str) -> str:
    with translation.override(language):
        return str(line_chart(metric="MRR@10", series=SERIES, run_url=lambda run: f"/runs/{run}/"))


def ticks(svg: str) -> list[str]:
    return re.findall(r'<text class="canon-chart-tick"[^>]*>([^<]*)</text>', svg)


def test_a_chinese_page_dates_its_runs_in_chinese() -> None:
    svg = chart("zh-hans")

    assert ticks(svg)[-2:] == ["2026年5月3日", "2026年11月24日（2 次运行）"]
    assert "2026-05-03" not in svg and "2026-11-24" not in svg
    assert "混合" in svg  # the modes in the points' titles, too


def test_an_english_page_keeps_its_iso_dates() -> None:
    svg = chart("en")

    assert ticks(svg)[-2:] == ["2026-05-03", "2026-11-24 (2 runs)"]


def test_the_axis_and_the_points_write_numbers_as_the_language_does() -> None:
    svg = chart("zh-hans")

    assert ticks(svg)[:5] == ["0.00", "0.25", "0.50", "0.75", "1.00"]
    assert re.search(r"<title>[^<]*0\.875</title>", svg)
