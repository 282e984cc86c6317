"""Cells read as Excel shows them: the number formats a document's tables use."""

from __future__ import annotations

import datetime

import pytest

from textkit.extract.numformat import display


@pytest.mark.parametrize(
    ("value", "number_format", "shown"),
    [
        (3.0, "General", "3"),
        (0.1 + 0.2, "General", "0.3"),
        (1234567.891, "#,##0.00", "1,234,567.89"),
        (0.5, "#,##0.00", "0.50"),
        (2.0, "0.##", "2"),
        (0.1234, "0.0%", "12.3%"),
        (0.25, "0%", "25%"),
        (-1234.5, "#,##0;(#,##0)", "(1,235)"),
        (1234.5, '"$"#,##0.00', "$1,234.50"),
        (1234.5, "[$€-407] #,##0.00", "€ 1,234.50"),
        (12.5, '0.0 "kg"', "12.5 kg"),
        (12345.678, "0.00E+00", "1.23E+04"),
        (1234567, "#,##0,", "1,235"),
        (-5, "0.00;[Red]-0.00", "-5.00"),
        (True, "General", "TRUE"),
        ("text", "@", "text"),
        (None, "General", ""),
        (datetime.datetime(2026, 3, 15), "mm-dd-yy", "2026-03-15"),
        (datetime.datetime(2026, 3, 5, 14, 7, 9), "d/m/yyyy h:mm:ss", "5/3/2026 14:07:09"),
        (datetime.datetime(2026, 3, 5), "[$-409]mmmm d, yyyy;@", "March 5, 2026"),
        (datetime.datetime(2026, 3, 5, 14, 7), "h:mm AM/PM", "2:07 PM"),
        (datetime.time(9, 30), "hh:mm", "09:30"),
        (datetime.datetime(2026, 3, 5), "d-mmm-yy", "5-Mar-26"),
        (datetime.datetime(2026, 3, 5), "dddd, mmmm dd", "Thursday, March 05"),
        (datetime.timedelta(hours=30, minutes=5), "[h]:mm", "30:05:00"),
    ],
)
def test_values_read_as_displayed(value: object, number_format: str, shown: str) -> None:
    assert display(value, number_format) == shown
