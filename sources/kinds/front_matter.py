"""Which items' front matter a source offers to its metadata map: one rule for every kind.

An item is read as Markdown exactly when its file name says so (the upload checks type a file
by its name, `Item.file_name`), and exactly then it offers the fields of its YAML or TOML front
matter, read by `textkit.extract.front_matter`: the reader the Markdown extractor uses to leave
the block out of the text and take its `title` as the document's title. A kind merges these
fields under what it knows beside the content (S3 user metadata and tags win).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from sources.kinds.base import Item
from textkit.extract import TEXT_MARKDOWN
from textkit.extract.front_matter import front_matter
from textkit.extract.registry import EXTENSIONS


def item_front_matter(item: Item, data: bytes) -> dict[str, Any]:
    """The front matter fields of `item`, whose bytes are `data`, when its file name makes it
    Markdown; {} otherwise, and when it has none. Never raises."""
    suffix = PurePosixPath(item.file_name).suffix.lower()
    if EXTENSIONS.get(suffix) != TEXT_MARKDOWN:
        return {}
    return front_matter(data)
