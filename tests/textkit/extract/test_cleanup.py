"""The clean-up every extractor shares (`textkit.extract.cleanup`): CJK text joined without
spaces (Korean keeps its own), dot leaders dropped in linear time, page numbers recognised."""

from __future__ import annotations

import time

import pytest

from textkit.extract import cleanup


def test_join_unspaced_keeps_sentence_breaks_and_korean_spaces() -> None:
    assert cleanup.join_unspaced("中文 字符\n换行") == "中文字符换行"
    assert cleanup.join_unspaced("结束。\n下一句") == "结束。\n下一句"
    assert cleanup.join_unspaced("第一段\n\n第二段") == "第一段\n\n第二段"
    assert cleanup.join_unspaced("한국어 문장") == "한국어 문장"
    assert cleanup.join_unspaced("Canon 支持 PDF") == "Canon 支持 PDF"
    table = "名称\t数量\n苹 果\t三"
    assert cleanup.join_unspaced(table, lines_are_rows=True) == "名称\t数量\n苹果\t三"


def test_dot_leader_removal_is_linear_on_hostile_input() -> None:
    started = time.perf_counter()
    assert cleanup.drop_dot_leaders("x" + "." * 2_000_000 + "y") == "x" + "." * 2_000_000 + "y"
    assert cleanup.drop_dot_leaders(". " * 1_000_000 + "z").endswith("z")
    assert time.perf_counter() - started < 2


@pytest.mark.parametrize("line", ["7", "- 12 -", "Page 3", "page 4 of 20", "xiv", "3 / 92"])
def test_page_numbers_are_recognised(line: str) -> None:
    assert cleanup.is_page_number(line)


@pytest.mark.parametrize("line", ["7 dwarfs", "Version 3.2", "Chapter 1"])
def test_other_short_lines_are_not_page_numbers(line: str) -> None:
    assert not cleanup.is_page_number(line)
