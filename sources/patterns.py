"""Include and exclude patterns of a source, gitignore-style (pathspec): `docs/**/*.md`,
`*.pdf`, `!drafts/`. An item is taken when some include matches (no includes: everything) and
no exclude does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pathspec
from django.utils.translation import gettext_noop

from textkit.reasons import ReasonedError, reason

# `detail`: pathspec's own words.
PATTERN_INVALID = reason(
    "source.pattern_invalid", gettext_noop("The pattern %(pattern)s is not valid: %(detail)s")
)


class PatternInvalid(ReasonedError, ValueError):
    """A pattern pathspec cannot read (a declared reason)."""


@dataclass(frozen=True)
class Patterns:
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @classmethod
    def of(cls, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> Patterns:
        patterns = cls(
            tuple(p for p in include if p.strip()), tuple(p for p in exclude if p.strip())
        )
        for pattern in (*patterns.include, *patterns.exclude):
            try:
                pathspec.GitIgnoreSpec.from_lines([pattern])
            except Exception as exc:  # pathspec raises several types for a bad pattern
                raise PatternInvalid(
                    PATTERN_INVALID(pattern=repr(pattern), detail=str(exc))
                ) from None
        return patterns

    def admits(self, path: str) -> bool:
        if self.include and not _spec(self.include).match_file(path):
            return False
        return not (self.exclude and _spec(self.exclude).match_file(path))


_SPECS: dict[tuple[str, ...], pathspec.GitIgnoreSpec] = {}


def _spec(lines: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    spec = _SPECS.get(lines)
    if spec is None:
        spec = _SPECS[lines] = pathspec.GitIgnoreSpec.from_lines(lines)
    return spec
