"""A spreadsheet cell's value as Excel shows it, from its number format: the part of Excel's
format language a document's tables use.

Supported: General (whole numbers without ".0", others to 15 significant digits, as Excel keeps
them); fixed decimals and thousands separators ("0.00", "#,##0"); percentages ("0.0%");
scientific ("0.00E+00"); literal text around a number ("$#,##0.00", '0.0 "kg"', "[$€-407]");
a second section for negative numbers ("#,##0;(#,##0)"); and dates and times (yyyy yy mmmm mmm
mm m dddd ddd dd d hh h mm ss AM/PM, elapsed [h]). Excel's built-in short date (format 14,
shown in the reader's locale) is written as ISO yyyy-mm-dd. Anything else (fractions, colours,
conditions) falls back to General.
"""

from __future__ import annotations

import datetime
import functools
import re
from decimal import ROUND_HALF_UP, Decimal

_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

# openpyxl's name for built-in format 14, which Excel shows as the locale's short date.
_LOCALE_SHORT_DATE = "mm-dd-yy"

# Quoted text, an escaped character, a bracketed code ([Red], [$€-407], [h]), or a date token.
_DATE_TOKEN_RE = re.compile(
    r'"[^"]*"|\\.|\[[^\]]*\]|am/pm|a/p|y+|m+|d+|h+|s+|\.0+|.', re.IGNORECASE | re.DOTALL
)
_NUMBER_RE = re.compile(r"[0#?][0#?,]*(?:\.[0#?]*)?(?:[eE][+-][0#]+)?|\.[0#?]+")
_QUOTED_OR_ESCAPED_RE = re.compile(r'"([^"]*)"|\\(.)|_.|\*.')
_BRACKET_RE = re.compile(r"\[([^\]]*)\]")


def display(value: object, number_format: str | None) -> str:
    """The text Excel shows for a cell holding `value` (as openpyxl reads it) in
    `number_format`."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return value
    fmt = number_format or "General"
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return _date_text(value, fmt)
    if isinstance(value, datetime.timedelta):
        return _elapsed_text(value)
    if isinstance(value, int | float):
        return _number_text(float(value), fmt)
    return str(value)


def general(value: float) -> str:
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return format(value, ".15g")


def _number_text(value: float, fmt: str) -> str:
    sections = _split_sections(fmt)
    section = sections[0]
    negative_section = len(sections) > 1 and value < 0
    if negative_section:
        section, value = sections[1], -value
    elif len(sections) > 2 and value == 0:
        section = sections[2]
    section = _BRACKET_RE.sub(_bracket_text, section)
    if section.strip().lower() in ("general", ""):
        return general(value)
    if "@" in section:
        return general(value)
    match = _NUMBER_RE.search(_QUOTED_OR_ESCAPED_RE.sub(lambda m: " " * len(m.group(0)), section))
    if match is None or "/" in section:
        return general(value)
    prefix, pattern, suffix = section[: match.start()], match.group(0), section[match.end() :]
    if "%" in prefix + suffix:
        value *= 100
    text = _format_number(value, pattern)
    return _literal(prefix) + text + _literal(suffix)


def _format_number(value: float, pattern: str) -> str:
    mantissa, _, exponent = pattern.upper().partition("E")
    integer_part, _, decimal_part = mantissa.partition(".")
    decimals = sum(c in "0#?" for c in decimal_part)
    if exponent:
        return f"{value:.{decimals}E}"
    grouping = "," if "," in integer_part.rstrip(",") else ""
    # Trailing commas scale by a thousand each ("#,##0," shows thousands).
    value /= 1000 ** (len(integer_part) - len(integer_part.rstrip(",")))
    # Excel rounds halves away from zero.
    rounded = Decimal(repr(value)).quantize(Decimal(1).scaleb(-decimals), ROUND_HALF_UP)
    text = f"{rounded:{grouping}.{decimals}f}"
    if "#" in decimal_part and "." in text:
        # Optional decimals ("0.##") drop their trailing zeros.
        optional = decimal_part.count("#")
        whole, fraction = text.split(".")
        keep = len(fraction.rstrip("0"))
        fraction = fraction[: max(keep, decimals - optional)]
        text = f"{whole}.{fraction}" if fraction else whole
    if "0" not in integer_part and text.startswith(("0.", "-0.")):
        text = text.replace("0.", ".", 1)
    return text


@functools.lru_cache(maxsize=256)
def _split_sections(fmt: str) -> tuple[str, ...]:
    """The format's sections (positive; negative; zero; text), split at unquoted semicolons."""
    sections: list[str] = []
    current, quoted = "", False
    for char in fmt:
        if char == '"':
            quoted = not quoted
        if char == ";" and not quoted:
            sections.append(current)
            current = ""
        else:
            current += char
    sections.append(current)
    return tuple(sections)


def _bracket_text(match: re.Match[str]) -> str:
    """[$€-407] is a currency symbol; [Red] and [>100] are colours and conditions."""
    code = match.group(1)
    if code.startswith("$"):
        return '"' + code[1:].split("-")[0] + '"'
    return ""


def _literal(text: str) -> str:
    return _QUOTED_OR_ESCAPED_RE.sub(
        lambda m: m.group(1) or m.group(2) or (" " if m.group(0).startswith("_") else ""), text
    )


def _date_text(value: datetime.date | datetime.time, fmt: str) -> str:
    section = _split_sections(fmt)[0]
    if section.lower() == _LOCALE_SHORT_DATE or not re.search("[ymdhs]", section, re.I):
        return _iso(value)
    if isinstance(value, datetime.time):
        value = datetime.datetime.combine(datetime.date(1899, 12, 30), value)
    elif not isinstance(value, datetime.datetime):
        value = datetime.datetime.combine(value, datetime.time())
    tokens = _date_tokens(section)
    twelve_hour = any(t.lower() in ("am/pm", "a/p") for t in tokens)
    return "".join(
        _date_token(value, tokens, index, twelve_hour) for index in range(len(tokens))
    ).strip()


@functools.lru_cache(maxsize=256)
def _date_tokens(section: str) -> tuple[str, ...]:
    return tuple(_DATE_TOKEN_RE.findall(section))


def _date_token(value: datetime.datetime, tokens: tuple[str, ...], index: int, twelve: bool) -> str:
    token = tokens[index]
    lower = token.lower()
    if token.startswith('"'):
        return token[1:-1]
    if token.startswith("\\"):
        return token[1:]
    if token.startswith("["):
        return str(int(value.hour)) if lower.strip("[]").startswith("h") else ""
    kind = lower[0]
    if kind == "y":
        return f"{value.year % 100:02d}" if len(token) <= 2 else str(value.year)
    if kind == "m" and _is_minutes(tokens, index):
        return f"{value.minute:02d}" if len(token) >= 2 else str(value.minute)
    if kind == "m":
        return {1: str(value.month), 2: f"{value.month:02d}"}.get(
            len(token), _MONTHS[value.month - 1][: 3 if len(token) == 3 else None]
        )
    if kind == "d":
        day = _DAYS[value.weekday()]
        return {1: str(value.day), 2: f"{value.day:02d}", 3: day[:3]}.get(len(token), day)
    if kind == "h":
        hour = (value.hour % 12 or 12) if twelve else value.hour
        return f"{hour:02d}" if len(token) >= 2 else str(hour)
    if kind == "s":
        return f"{value.second:02d}" if len(token) >= 2 else str(value.second)
    if lower in ("am/pm", "a/p"):
        marker = "AM" if value.hour < 12 else "PM"
        return marker if lower == "am/pm" else marker[0]
    if token.startswith("."):
        return "." + f"{value.microsecond:06d}"[: len(token) - 1]
    return token


def _is_minutes(tokens: tuple[str, ...], index: int) -> bool:
    """An "m" after an hour or before a second is minutes, not the month."""
    for step, kinds in ((-1, "h"), (1, "s")):
        position = index + step
        while 0 <= position < len(tokens):
            kind = _kind(tokens[position])
            if kind:
                return kind in kinds
            position += step
    return False


def _kind(token: str) -> str:
    """The date part a token shows ("y", "m", "d", "h", "s"), "" for anything else."""
    lower = token.lower()
    if lower.startswith("["):
        lower = lower[1:]
        return lower[0] if lower[:1] in ("h", "m", "s") else ""
    return lower[0] if lower[0] in "ymdhs" else ""


def _iso(value: datetime.date | datetime.time) -> str:
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        return value.date().isoformat()
    return value.isoformat(sep=" ") if isinstance(value, datetime.datetime) else value.isoformat()


def _elapsed_text(value: datetime.timedelta) -> str:
    seconds = int(value.total_seconds())
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    return f"{sign}{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
