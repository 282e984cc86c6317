"""What approving (or rolling back to) a build changes, chunk by chunk, for the confirmation page.

Chunks of the two builds are matched by content hash in ordinal order (difflib's longest matching
runs): equal runs are unchanged, and in a replaced run the chunks are paired by position —
a pair is *changed* and shown with word-level highlighting, the chunks left over are *added* or
*removed*. Only hashes are read for the whole document; texts are read for the rows shown, and
at most `max_rows` rows (unchanged runs collapsed into one row each) are rendered, so a large
document costs two small queries and a bounded amount of diffing. Reads only.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Literal

from kb.models import Build, Chunk

RowKind = Literal["added", "removed", "changed", "unchanged"]
Segment = tuple[Literal["equal", "insert", "delete"], str]

# Words (with the spaces after them kept as their own tokens), so the rendered text keeps its
# line breaks and spacing.
_TOKENS = re.compile(r"\s+|[^\s]+")
# A side of a changed pair longer than this is compared on its first words only (SequenceMatcher
# is quadratic in the worst case); chunk sizes are far below it by default.
MAX_WORDS = 3000


@dataclass(frozen=True)
class ChunkRow:
    kind: RowKind
    old_ordinal: int | None = None
    new_ordinal: int | None = None
    heading_path: str = ""
    text: str = ""  # the whole chunk, for added and removed rows
    segments: list[Segment] = field(default_factory=list)  # for changed rows
    count: int = 0  # for a collapsed run of unchanged chunks
    truncated: bool = False


@dataclass(frozen=True)
class ChunkDiff:
    added: int
    removed: int
    changed: int
    unchanged: int
    rows: list[ChunkRow]
    rows_not_shown: int  # rows beyond max_rows (each a changed, added or removed chunk)

    @property
    def identical(self) -> bool:
        return not (self.added or self.removed or self.changed)


def _hashes(build: Build | None) -> list[tuple[int, str]]:
    if build is None:
        return []
    return list(
        Chunk.objects.filter(build_id=build.pk)
        .order_by("ordinal")
        .values_list("ordinal", "content_hash")
    )


def _texts(build: Build | None, ordinals: set[int]) -> dict[int, tuple[str, str]]:
    if build is None or not ordinals:
        return {}
    return {
        ordinal: (text, heading)
        for ordinal, text, heading in Chunk.objects.filter(
            build_id=build.pk, ordinal__in=sorted(ordinals)
        ).values_list("ordinal", "text", "heading_path")
    }


def word_diff(old: str, new: str) -> tuple[list[Segment], bool]:
    """`old` → `new` as segments of equal, deleted and inserted text (words and the spaces
    between them), and whether the comparison was cut at MAX_WORDS per side."""
    a, b = _TOKENS.findall(old), _TOKENS.findall(new)
    truncated = len(a) > 2 * MAX_WORDS or len(b) > 2 * MAX_WORDS
    a, b = a[: 2 * MAX_WORDS], b[: 2 * MAX_WORDS]
    segments: list[Segment] = []

    def add(kind: Literal["equal", "insert", "delete"], tokens: list[str]) -> None:
        if not tokens:
            return
        text = "".join(tokens)
        if segments and segments[-1][0] == kind:
            segments[-1] = (kind, segments[-1][1] + text)
        else:
            segments.append((kind, text))

    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            add("equal", a[i1:i2])
        else:
            add("delete", a[i1:i2])
            add("insert", b[j1:j2])
    return segments, truncated


def chunk_diff(*, candidate: Build, live: Build | None, max_rows: int = 40) -> ChunkDiff:
    """The per-chunk difference from `live` (None: nothing served) to `candidate`."""
    old, new = _hashes(live), _hashes(candidate)
    matcher = difflib.SequenceMatcher(
        None, [h for _, h in old], [h for _, h in new], autojunk=False
    )
    # (kind, old ordinal, new ordinal, run length) first; texts are read for the shown rows only
    plan: list[tuple[RowKind, int | None, int | None, int]] = []
    counts = {"added": 0, "removed": 0, "changed": 0, "unchanged": 0}
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            plan.append(("unchanged", old[i1][0], new[j1][0], i2 - i1))
            counts["unchanged"] += i2 - i1
            continue
        paired = min(i2 - i1, j2 - j1)
        for k in range(paired):
            plan.append(("changed", old[i1 + k][0], new[j1 + k][0], 1))
        for i in range(i1 + paired, i2):
            plan.append(("removed", old[i][0], None, 1))
        for j in range(j1 + paired, j2):
            plan.append(("added", None, new[j][0], 1))
        counts["changed"] += paired
        counts["removed"] += (i2 - i1) - paired
        counts["added"] += (j2 - j1) - paired
    shown: list[tuple[RowKind, int | None, int | None, int]] = []
    changes_shown = not_shown = 0
    for entry in plan:
        if entry[0] != "unchanged":
            if changes_shown >= max_rows:
                not_shown += 1
                continue
            changes_shown += 1
        elif not_shown:
            continue
        shown.append(entry)
    # a collapsed run after the last shown change says nothing useful when changes were cut
    while not_shown and shown and shown[-1][0] == "unchanged":
        shown.pop()
    old_texts = _texts(
        live, {o for k, o, _, _ in shown if k in ("changed", "removed") and o is not None}
    )
    new_texts = _texts(
        candidate, {n for k, _, n, _ in shown if k in ("changed", "added") and n is not None}
    )
    rows: list[ChunkRow] = []
    for kind, o, n, length in shown:
        if kind == "unchanged":
            rows.append(ChunkRow(kind, old_ordinal=o, new_ordinal=n, count=length))
        elif kind == "changed":
            assert o is not None and n is not None
            old_text, _ = old_texts.get(o, ("", ""))
            new_text, heading = new_texts.get(n, ("", ""))
            segments, truncated = word_diff(old_text, new_text)
            rows.append(
                ChunkRow(
                    kind,
                    old_ordinal=o,
                    new_ordinal=n,
                    heading_path=heading,
                    segments=segments,
                    truncated=truncated,
                )
            )
        else:
            ordinal = o if kind == "removed" else n
            assert ordinal is not None
            text, heading = (old_texts if kind == "removed" else new_texts).get(ordinal, ("", ""))
            rows.append(
                ChunkRow(kind, old_ordinal=o, new_ordinal=n, heading_path=heading, text=text)
            )
    return ChunkDiff(
        added=counts["added"],
        removed=counts["removed"],
        changed=counts["changed"],
        unchanged=counts["unchanged"],
        rows=rows,
        rows_not_shown=not_shown,
    )
