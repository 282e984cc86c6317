"""Mallard help pages (GNOME's `.page` XML) rendered to plain HTML for B8's second corpus.

What Yelp shows of a topic, in HTML Canon's own parser reads: the title, the body's blocks
(paragraphs, steps and lists, term lists, notes, tables, code and screens, sections with their
titles) and inline text (GUI labels, keys as `Ctrl+C`, commands, file names). Left out, as Yelp
leaves them out of the page: the `<info>` block (credits, revisions, licence), editorial
`<comment>`s and images. Conditional content is resolved for a plain GNOME desktop shown as
HTML (`platform:gnome-classic`, `action:install` and `target:mobile` are false). A link with no
text of its own shows its target page's title, and a guide page (or section) lists the topics
that name it as their guide, title and description, as Yelp's generated link lists do.

Everything here is a pure function of the pages' bytes: the same files give the same HTML.
"""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

MAL = "{http://projectmallard.org/1.0/}"
IF = "{http://projectmallard.org/if/1.0/}"

# Conditional tokens true for the page as rendered here; every other token is false.
TRUE_TOKENS = frozenset({"platform:gnome", "target:html", "target:desktop"})

BLOCK_SKIP = frozenset({"info", "comment", "media", "links", "include"})
INLINE_SKIP = frozenset({"comment", "media", "include"})


@dataclass(frozen=True)
class Topic:
    """What a page tells its guides about itself: its title, description and guide links."""

    page_id: str
    title: str
    desc: str
    guides: tuple[str, ...]  # "page" or "page#section" xrefs, in document order


@dataclass
class Help:
    """Every page of one help directory (one application's help in one language)."""

    pages: dict[str, ET.Element] = field(default_factory=dict)
    topics: dict[str, Topic] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # file name -> page id

    @classmethod
    def load(cls, directory: Path) -> Help:
        found = cls()
        for path in sorted(directory.glob("*.page")):
            root = ET.parse(path).getroot()  # noqa: S314 - Debian's own help pages, not input
            page_id = root.get("id") or path.stem
            found.pages[page_id] = root
            found.files[path.name] = page_id
            info = root.find(f"{MAL}info")
            title = root.find(f"{MAL}title")
            desc = info.find(f"{MAL}desc") if info is not None else None
            guides = tuple(
                str(link.get("xref"))
                for link in (info.findall(f"{MAL}link") if info is not None else [])
                if link.get("type") == "guide" and link.get("xref")
            )
            found.topics[page_id] = Topic(
                page_id=page_id,
                title=_plain(title) if title is not None else page_id,
                desc=_plain(desc) if desc is not None else "",
                guides=guides,
            )
        return found

    def title_of(self, xref: str) -> str:
        page = xref.split("#", 1)[0]
        topic = self.topics.get(page)
        return topic.title if topic else ""

    def topics_of(self, guide: str) -> list[Topic]:
        """The topics naming `guide` ("page" or "page#section") as theirs, by title."""
        return sorted(
            (t for t in self.topics.values() if guide in t.guides),
            key=lambda t: (t.title.casefold(), t.page_id),
        )


def _local(tag: object) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _plain(element: ET.Element) -> str:
    """An element's text with inline markup flattened and whitespace collapsed."""
    return " ".join("".join(element.itertext()).split())


def condition(test: str | None) -> bool:
    """Mallard's conditional `test`: comma-separated alternatives, each a space-separated set
    of tokens that must all hold; `!token` negates."""
    if test is None:
        return True
    for alternative in test.split(","):
        tokens = alternative.split()
        if tokens and all(
            (tok[1:] not in TRUE_TOKENS) if tok.startswith("!") else (tok in TRUE_TOKENS)
            for tok in tokens
        ):
            return True
    return False


class _Renderer:
    def __init__(self, help_: Help, page_id: str) -> None:
        self.help = help_
        self.page_id = page_id
        self.out: list[str] = []

    # --- inline ---

    def inline(self, element: ET.Element) -> str:
        """The inline content of `element` as escaped HTML text."""
        parts = [html.escape(element.text or "")]
        for child in element:
            parts.append(self.inline_element(child))
            parts.append(html.escape(child.tail or ""))
        return "".join(parts)

    def inline_element(self, child: ET.Element) -> str:
        name = _local(child.tag)
        if name in INLINE_SKIP or not condition(child.get(f"{IF}test")):
            return ""
        if name == "keyseq":
            keys = [self.inline(k).strip() for k in child if _local(k.tag) == "key"]
            return "+".join(keys) if keys else self.inline(child)
        if name == "guiseq":
            guis = [self.inline(g).strip() for g in child if _local(g.tag) == "gui"]
            return " ▸ ".join(guis) if guis else self.inline(child)
        if name == "link":
            text = self.inline(child)
            if text.strip():
                return text
            xref, href = child.get("xref"), child.get("href")
            if xref:
                return html.escape(self.help.title_of(xref))
            return html.escape(href or "")
        if name in ("code", "cmd", "input", "output", "sys", "file", "key", "var"):
            return f"<code>{self.inline(child)}</code>"
        if name == "em":
            return f"<em>{self.inline(child)}</em>"
        if name == "if" or name == "choose":
            return self.inline(child) if name == "if" and condition(child.get("test")) else ""
        return self.inline(child)

    # --- blocks ---

    def blocks(self, parent: ET.Element, level: int) -> None:
        for child in parent:
            self.block(child, level)

    def block(self, element: ET.Element, level: int) -> None:
        name = _local(element.tag)
        if name in BLOCK_SKIP or not condition(element.get(f"{IF}test")):
            return
        if name == "title":
            return  # written by the page or section that holds it
        if name == "choose":
            for branch in element:
                branch_name = _local(branch.tag)
                if branch_name == "else" or (
                    branch_name == "when" and condition(branch.get("test"))
                ):
                    self.blocks(branch, level)
                    return
            return
        if name in ("if", "when", "else"):
            if name != "if" or condition(element.get("test")):
                self.blocks(element, level)
            return
        if name == "section":
            self.section(element, level)
        elif name == "p":
            self.out.append(f"<p>{self.inline(element)}</p>")
        elif name in ("code", "screen", "synopsis"):
            self.out.append(f"<pre>{self.inline(element)}</pre>")
        elif name in ("steps", "list", "tree"):
            tag = "ol" if name == "steps" else "ul"
            self.caption(element, level)
            self.out.append(f"<{tag}>")
            for item in element:
                if _local(item.tag) == "item":
                    self.out.append("<li>")
                    self.item_body(item, level)
                    self.out.append("</li>")
            self.out.append(f"</{tag}>")
        elif name == "terms":
            self.caption(element, level)
            self.out.append("<dl>")
            for item in element:
                if _local(item.tag) != "item":
                    continue
                for term in item.findall(f"{MAL}title"):
                    self.out.append(f"<dt>{self.inline(term)}</dt>")
                self.out.append("<dd>")
                self.blocks(item, level)
                self.out.append("</dd>")
            self.out.append("</dl>")
        elif name == "table":
            self.table(element, level)
        elif name in ("note", "example", "figure", "listing", "quote", "div", "synopsis"):
            self.caption(element, level)
            self.out.append(f'<div class="{name}">')
            self.blocks(element, level)
            self.out.append("</div>")
        elif name == "item":
            self.item_body(element, level)
        else:  # an unknown block: its text, so nothing is silently lost
            self.out.append(f"<p>{self.inline(element)}</p>")

    def item_body(self, item: ET.Element, level: int) -> None:
        if (item.text and item.text.strip()) or any(_local(c.tag) in _INLINE_NAMES for c in item):
            self.out.append(self.inline(item))  # a list item of inline text only
        else:
            self.blocks(item, level)

    def caption(self, element: ET.Element, level: int) -> None:
        title = element.find(f"{MAL}title")
        if title is not None:
            self.out.append(f"<p><strong>{self.inline(title)}</strong></p>")

    def table(self, element: ET.Element, level: int) -> None:
        self.caption(element, level)
        self.out.append("<table>")
        for row in element.iter(f"{MAL}tr"):
            self.out.append("<tr>")
            for cell in row:
                if _local(cell.tag) in ("td", "th"):
                    self.out.append("<td>")
                    self.blocks(cell, level)
                    self.out.append("</td>")
            self.out.append("</tr>")
        self.out.append("</table>")

    def section(self, element: ET.Element, level: int) -> None:
        heading = min(level + 1, 6)
        title = element.find(f"{MAL}title")
        self.out.append("<section>")
        if title is not None:
            self.out.append(f"<h{heading}>{self.inline(title)}</h{heading}>")
        self.blocks(element, level + 1)
        section_id = element.get("id")
        if section_id:
            self.topic_list(f"{self.page_id}#{section_id}")
        self.out.append("</section>")

    def topic_list(self, guide: str) -> None:
        topics = self.help.topics_of(guide)
        if not topics:
            return
        self.out.append("<ul>")
        for t in topics:
            desc = f": {html.escape(t.desc)}" if t.desc else ""
            self.out.append(f"<li>{html.escape(t.title)}{desc}</li>")
        self.out.append("</ul>")


_INLINE_NAMES = frozenset(
    {"gui", "key", "keyseq", "guiseq", "link", "em", "code", "cmd", "app", "file", "sys"}
    | {"input", "output", "var", "span", "em", "cite", "hi"}
)


def render(help_: Help, page_id: str, lang: str) -> str:
    """One page of `help_` as an HTML document (title, description and body)."""
    root = help_.pages[page_id]
    topic = help_.topics[page_id]
    r = _Renderer(help_, page_id)
    r.out.append(f"<h1>{html.escape(topic.title)}</h1>")
    r.blocks(root, 1)
    r.topic_list(page_id)
    desc = f'<meta name="description" content="{html.escape(topic.desc)}">' if topic.desc else ""
    body = "\n".join(r.out)
    return (
        f'<!DOCTYPE html>\n<html lang="{lang}">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(topic.title)}</title>\n{desc}\n</head>\n<body>\n<main>\n"
        f"{body}\n</main>\n</body>\n</html>\n"
    )
