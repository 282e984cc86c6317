"""Progress of a long extraction (OCR), for the build's bar: textkit knows nothing of builds, so
the caller (the parse stage) sets a callback for the time of one extraction and the extractor
reports through `report`.

    with progress.reporting(callback):
        extract(...)          # calls callback("OCR page 3/40") as it goes

The callback runs in the extracting thread; what it raises propagates (a worker whose lease is
lost must stop), so it should not fail for any other reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Callback = Callable[[str], None]

_CALLBACK: ContextVar[Callback | None] = ContextVar("textkit_extract_progress", default=None)


@contextmanager
def reporting(callback: Callback) -> Iterator[None]:
    """Send the progress of extractions run inside the block to `callback`."""
    token = _CALLBACK.set(callback)
    try:
        yield
    finally:
        _CALLBACK.reset(token)


def report(label: str) -> None:
    """Say what the extraction is doing now ("OCR page 12/40"); nothing when nobody listens."""
    callback = _CALLBACK.get()
    if callback is not None:
        callback(label)
