"""OCR (textkit.extract.ocr): English and Chinese read from rendered pages, reading order and
paragraphs from the boxes, the page and time limits per document, progress, and an engine that
loads offline with bounded threads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.textkit.extract.ocr_fixtures import (
    char_accuracy,
    page,
    two_columns,
    with_upside_down_lines,
)
from textkit.extract import ocr, progress
from textkit.extract.base import ParseError
from textkit.extract.ocr import Line, OcrOptions

ENGLISH = [
    ["The pump station keeps two spare impellers", "in the north storeroom at all times."],
    ["Pressure above forty bar trips the relief valve", "and raises an alarm in the control room."],
]
CHINESE = [
    ["知识库管理系统把上传的文件切分成段落，", "并为每一段建立向量索引。"],
    ["扫描的合同和照片也能通过光学字符识别被检索。"],
]


def text_of(paragraphs: list[ocr.Paragraph]) -> str:
    return "\n".join(p.text for p in paragraphs)


def test_english_is_read_in_order_and_in_paragraphs() -> None:
    found = ocr.recognise(page(ENGLISH, title="Maintenance notes", title_size=56))
    assert [p.lines for p in found] == [1, 2, 2]
    assert found[0].text == "Maintenance notes"
    # A box's height is that of the line's ink, ascenders and descenders: 56 and 30 pixel type
    # differ by less than their sizes do.
    assert found[0].height > 1.15 * found[1].height
    expected = "Maintenance notes\n" + "\n".join(" ".join(lines) for lines in ENGLISH)
    assert char_accuracy(expected, text_of(found)) >= 0.97
    assert "impellers in the north storeroom" in found[1].text  # lines joined with a space


def test_chinese_is_read() -> None:
    found = ocr.recognise(page(CHINESE, size=34))
    expected = "".join("".join(lines) for lines in CHINESE)
    assert char_accuracy(expected, text_of(found)) >= 0.9
    assert "知识库" in text_of(found) and "光学字符识别" in text_of(found)
    assert len(found) == 2


def test_mixed_english_and_chinese_on_one_line() -> None:
    found = text_of(ocr.recognise(page([["Canon 支持 PDF 和 PNG 文件的检索。"]], size=36)))
    assert char_accuracy("Canon支持PDF和PNG文件的检索。", found) >= 0.85
    assert "Canon" in found and "检索" in found


def test_two_columns_are_read_left_column_first() -> None:
    left = ["Left column opens here", "and carries on below", "to finish the story."]
    right = ["Right column starts", "after the left ends", "with its own words."]
    found = text_of(ocr.recognise(two_columns(left, right)))
    assert found.index("Left column") < found.index("finish the story") < found.index("Right")


# --- which way up ---------------------------------------------------------------------------


def test_an_upside_down_line_among_upright_ones_is_read_the_right_way_up() -> None:
    """rapidocr's classifier squeezed each whole line into its 48 x 192 input: a long line
    turned over came out as garbage ("wa ery evp sr ers uy rrnit"). The page is the way up
    most of its text is, so it is read in that order."""
    upright = [
        "Checked by the night shift on every working day",
        "Return this form to the quality office by Friday",
        "Signed copies are kept for at least five years",
    ]
    upside_down = [
        "Warranty and service terms apply to every unit",
        "Keep the guard closed while the belt is moving",
    ]
    for size in (40, 44):
        found = [
            p.text for p in ocr.recognise(with_upside_down_lines(upright, upside_down, size=size))
        ]
        assert found == [*upright, *upside_down], size


def test_an_upside_down_chinese_line_is_read() -> None:
    upright = ["扫描的合同也能通过光学字符识别被检索。", "每一页都按原来的顺序读出。"]
    upside_down = ["知识库管理系统把上传的文件切分成段落，并为每一段建立向量索引。"]
    found = text_of(ocr.recognise(with_upside_down_lines(upright, upside_down, size=36)))
    assert char_accuracy("".join(upright + upside_down), found) >= 0.95
    assert found.index("光学字符识别") < found.index("原来的顺序") < found.index("知识库管理系统")


def test_a_page_scanned_upside_down_is_read_in_order() -> None:
    found = ocr.recognise(page(ENGLISH, title="Maintenance notes", title_size=56).rotate(180))
    assert [p.text for p in found] == [
        "Maintenance notes",
        *(" ".join(lines) for lines in ENGLISH),
    ]


def test_upright_lines_stay_upright() -> None:
    """Short lines (a page number, a word) look much the same either way up: they follow their
    page."""
    lines = [["Contents"], ["1 Scope of the service", "2 Spare parts and tools"], ["Page 12"]]
    found = text_of(ocr.recognise(page(lines, size=30)))
    expected = "\n".join(" ".join(paragraph) for paragraph in lines)
    assert char_accuracy(expected, found) >= 0.97


# --- layout from boxes alone ----------------------------------------------------------------


def box(text: str, left: float, top: float, width: float = 300, height: float = 30) -> Line:
    return Line(text, left, top, left + width, top + height, height)


def test_pieces_of_one_line_are_joined_left_to_right() -> None:
    lines = [box("world", 420, 102), box("hello", 100, 100)]
    assert [p.text for p in ocr.layout(lines, 1000)] == ["hello world"]


def test_a_wide_gap_or_a_larger_type_starts_a_paragraph() -> None:
    lines = [
        box("Heading", 100, 50, height=50),
        box("first line", 100, 120),
        box("second line", 100, 160),
        box("after a gap", 100, 260),
    ]
    assert [p.text for p in ocr.layout(lines, 1000)] == [
        "Heading",
        "first line second line",
        "after a gap",
    ]


def test_chinese_lines_join_without_a_space() -> None:
    lines = [box("扫描的合同", 100, 100), box("也能检索。", 100, 140)]
    assert [p.text for p in ocr.layout(lines, 1000)] == ["扫描的合同也能检索。"]


def test_a_title_across_both_columns_comes_before_them() -> None:
    lines = [box("A title across the page", 100, 20, width=900)]
    lines += [box(f"left {i}", 100, 100 + 40 * i) for i in range(4)]
    lines += [box(f"right {i}", 600, 100 + 40 * i) for i in range(4)]
    texts = [p.text for p in ocr.layout(lines, 1100)]
    assert texts == [
        "A title across the page",
        "left 0 left 1 left 2 left 3",
        "right 0 right 1 right 2 right 3",
    ]


# --- limits and progress --------------------------------------------------------------------


def test_more_pages_than_the_limit_are_refused_before_any_ocr() -> None:
    limited = ocr.configured(OcrOptions(max_pages=2))
    with limited, pytest.raises(ParseError, match=r"3 pages that need OCR .* limit is 2 pages"):
        ocr.DocumentOcr(3)


def test_ocr_stops_at_the_time_limit_and_says_how_far_it_got(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def slow(image: object) -> list[ocr.Paragraph]:
        time.sleep(0.3)
        return []

    monkeypatch.setattr(ocr, "recognise", slow)
    with ocr.configured(OcrOptions(max_seconds=0.2)):
        session = ocr.DocumentOcr(3)
        session.page(page([]))
        with pytest.raises(ParseError, match=r"limit of 0 seconds .* read 1 of 3 pages"):
            session.page(page([]))


def test_progress_says_which_page_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ocr, "recognise", lambda image: [])
    labels: list[str] = []
    with progress.reporting(labels.append):
        session = ocr.DocumentOcr(2)
        session.page(page([]))
        session.page(page([]))
    assert labels == ["OCR page 1/2", "OCR page 2/2"]
    progress.report("nobody listens now")  # no callback: nothing happens


def test_pixels_past_the_limit_are_refused() -> None:
    with ocr.configured(OcrOptions(max_pixels=1000)):
        with pytest.raises(ParseError, match="40 by 30 pixels; the limit for OCR is 1,000"):
            ocr.check_pixels(40, 30)
        ocr.check_pixels(40, 25)


def test_the_engine_loads_offline_with_bounded_threads(tmp_path: Path) -> None:
    """In a fresh process with every network call refused: the models ship in the wheel, and
    each onnxruntime session runs on the threads it was given."""
    script = textwrap.dedent(
        """
        import socket

        def refuse(*args, **kwargs):
            raise OSError("network refused by the test")

        socket.socket.connect = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse

        from tests.textkit.extract.ocr_fixtures import page
        from textkit.extract import ocr

        with ocr.configured(ocr.OcrOptions(threads=1)):
            found = ocr.recognise(page([["Offline reading works"]], size=40))
        engine = ocr._engine(1)
        sessions = [engine.text_det.session, engine.text_cls.session, engine.text_rec.session]
        threads = {s.session.get_session_options().intra_op_num_threads for s in sessions}
        print(found[0].text, threads)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[3],
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Offline reading works {1}"
