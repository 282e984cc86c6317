"""Choices a knowledge base makes about what its files' text includes, for the extractions run
inside `configured(...)` (the parse stage sets them from the build's knowledge base; outside
it the defaults hold). OCR's own limits and threads are `ocr.OcrOptions`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class ExtractOptions:
    """`headers_footers`: index a word-processing document's page headers and footers (often a
    company name and page numbers repeated on every page: off by default). Footnotes and
    endnotes are the document's own text and are always indexed."""

    headers_footers: bool = False


_DEFAULT = ExtractOptions()
_OPTIONS: ContextVar[ExtractOptions | None] = ContextVar("textkit_extract_options", default=None)


@contextmanager
def configured(options: ExtractOptions) -> Iterator[None]:
    """Use `options` for the extractions run inside the block."""
    token = _OPTIONS.set(options)
    try:
        yield
    finally:
        _OPTIONS.reset(token)


def current() -> ExtractOptions:
    return _OPTIONS.get() or _DEFAULT
