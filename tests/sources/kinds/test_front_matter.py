"""One rule for every source kind: an item offers its front matter to the metadata map exactly
when its file name makes it Markdown (as the upload checks read it), with the fields the
Markdown extractor leaves out of the text (the reader itself: tests/textkit/extract/
test_front_matter.py)."""

from __future__ import annotations

from sources.kinds.base import Item
from sources.kinds.front_matter import item_front_matter

NOTE = b"---\ntitle: Herons\nyear: soon\n---\n# Herons\n"


def test_markdown_items_offer_their_front_matter() -> None:
    for item in [
        Item("docs/herons.md", version="1"),
        Item("docs/HERONS.MARKDOWN", version="1"),
        Item("notes/herons", version="1", name="herons.md"),  # a page served as text/markdown
    ]:
        assert item_front_matter(item, NOTE) == {"title": "Herons", "year": "soon"}


def test_other_items_offer_none() -> None:
    for item in [
        Item("docs/herons.txt", version="1"),
        Item("docs/herons.md.html", version="1"),
        Item("docs/herons.md", version="1", name="herons.html"),  # read as HTML: no
    ]:
        assert item_front_matter(item, NOTE) == {}


def test_toml_front_matter_is_offered_too() -> None:
    toml = b'+++\ntitle = "Egrets"\nweight = 3\n+++\n# Egrets\n'

    assert item_front_matter(Item("egrets.md", version="1"), toml) == {
        "title": "Egrets",
        "weight": 3,
    }
