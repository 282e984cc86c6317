"""The text a build's chunk offsets count into: the parse stage's extraction of the revision
(`Build.text_path`, a derived file), read back as `Extracted.text()` (blocks, headings
included, joined by blank lines — what the chunker counted in).

Derived files are content-addressed and never rewritten, so a text read once is the text for
good: it is kept in a small per-process cache by path (bounded in characters; a very long text
is read each time), so a search that expands several hits of one document, or a reader
following citations into it, reads the file once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from kb import storage
from textkit import extract as extractors

# The cache holds at most this many characters in all, and no single text longer than a
# quarter of it.
CACHE_CHARS = 16_000_000

_cache: OrderedDict[str, str] = OrderedDict()
_cached_chars = 0
_lock = threading.Lock()


class TextUnreadable(Exception):
    """The stored extraction is missing, damaged or not an extraction (a restore without
    derived files): a rebuild of the revision parses it again."""


def extracted_text(path: str) -> str:
    """The extracted text stored at `path`. Raises TextUnreadable, or
    storage.StorageUnavailable when the store cannot be reached (try again later)."""
    global _cached_chars
    with _lock:
        text = _cache.get(path)
        if text is not None:
            _cache.move_to_end(path)
            return text
    try:
        content = storage.read_text(path)
    except storage.StoredFileProblem as exc:
        raise TextUnreadable(f"the stored extraction is {exc.problem}") from exc
    except storage.StorageUnavailable:
        raise
    except storage.StorageError as exc:
        raise TextUnreadable("the store refused the stored extraction") from exc
    except UnicodeDecodeError as exc:
        raise TextUnreadable("the stored extraction is not text") from exc
    try:
        text = extractors.Extracted.from_json(content).text()
    except ValueError:
        # Stored before the parse stage kept blocks as JSON: the file is the plain text.
        text = content
    if len(text) <= CACHE_CHARS // 4:
        with _lock:
            if path not in _cache:
                _cache[path] = text
                _cached_chars += len(text)
                while _cached_chars > CACHE_CHARS:
                    _, dropped = _cache.popitem(last=False)
                    _cached_chars -= len(dropped)
    return text


def cache_clear() -> None:
    """Forget every cached text (tests)."""
    global _cached_chars
    with _lock:
        _cache.clear()
        _cached_chars = 0
