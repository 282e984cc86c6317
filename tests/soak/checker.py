"""The soak's judge: every result set a searcher got, against the visibility rule.

Pure Python (no Django), so a unit test can feed it a bad result set and watch it flag it
(tests/soak/test_checker.py). What it cannot know from the result set alone comes from the
driver's `Ledger` (who may read which document, when a document was surely deleted, when a
rollback may have moved a pointer back) and, per result set, from the database (which builds
were ever published, which failed).

A result set is judged on the interval [sent, received] in which the search ran; a rule that
depends on time only fires when the interval lies wholly inside the period the rule holds in, so
no race between a searcher and the driver can produce a false alarm.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Hit:
    document_key: str
    build_id: int
    revision: int


@dataclass(frozen=True)
class ResultSet:
    searcher: str
    groups: frozenset[str] | None  # the key's access groups; None: reads every group
    sent: float
    received: float
    hits: tuple[Hit, ...]


@dataclass
class Ledger:
    """What the driver did that the rule depends on. Thread-safe: the driver writes while the
    searchers read."""

    groups: dict[str, frozenset[str]] = field(default_factory=dict)
    # document key -> [from, until): surely deleted (the delete had returned, no restore begun)
    deleted: dict[str, list[list[float]]] = field(default_factory=lambda: defaultdict(list))
    # document key -> [start, end] of each rollback call (its commit lies somewhere inside)
    rewinds: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def created(self, key: str, groups: Iterable[str]) -> None:
        with self._lock:
            self.groups[key] = frozenset(groups)

    def delete_returned(self, key: str, at: float) -> None:
        with self._lock:
            spans = self.deleted[key]
            if not spans or spans[-1][1] != math.inf:
                spans.append([at, math.inf])

    def restore_started(self, key: str, at: float) -> None:
        with self._lock:
            spans = self.deleted[key]
            if spans and spans[-1][1] == math.inf:
                spans[-1][1] = at

    def rewind(self, key: str, start: float, end: float) -> None:
        with self._lock:
            self.rewinds[key].append((start, end))

    def document_groups(self, key: str) -> frozenset[str] | None:
        with self._lock:
            return self.groups.get(key)

    def surely_deleted(self, key: str, start: float, end: float) -> bool:
        with self._lock:
            return any(lo <= start and end <= hi for lo, hi in self.deleted.get(key, ()))

    def rewound(self, key: str, start: float, end: float) -> bool:
        """Whether a rollback of `key` may have committed between `start` and `end`."""
        with self._lock:
            return any(lo < end and hi > start for lo, hi in self.rewinds.get(key, ()))


@dataclass
class Seen:
    revision: int
    sent: float


class Checker:
    """Judges result sets in the order each searcher received them (one Checker for all
    searchers; thread-safe)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.checked = 0
        self.hits = 0
        self.violations: list[str] = []
        self._seen: dict[tuple[str, str], Seen] = {}
        self._lock = threading.Lock()

    def check(
        self, result: ResultSet, *, published: Iterable[int], failed: Iterable[int]
    ) -> list[str]:
        """The violations in one result set. `published`: which of its builds were ever made
        live (a publication event names them); `failed`: which of them are in state failed."""
        published, failed = set(published), set(failed)
        found: list[str] = []
        where = f"{result.searcher} at {result.sent:.3f}"
        builds: dict[str, set[int]] = defaultdict(set)
        revisions: dict[str, set[int]] = defaultdict(set)
        for hit in result.hits:
            builds[hit.document_key].add(hit.build_id)
            revisions[hit.document_key].add(hit.revision)
        for key, build_ids in sorted(builds.items()):
            if len(build_ids) > 1:
                found.append(f"{where}: {key} from several builds {sorted(build_ids)}")
            groups = self.ledger.document_groups(key)
            if groups is None:
                found.append(f"{where}: {key} is no document the driver made")
            elif result.groups is not None and groups and not groups & result.groups:
                found.append(f"{where}: {key} needs {sorted(groups)}, the key holds none")
            if self.ledger.surely_deleted(key, result.sent, result.received):
                found.append(f"{where}: {key} was deleted before this search began")
            for build_id in sorted(build_ids):
                if build_id in failed:
                    found.append(f"{where}: {key} served from failed build {build_id}")
                elif build_id not in published:
                    found.append(f"{where}: {key} served from build {build_id}, never published")
        with self._lock:
            for key, numbers in sorted(revisions.items()):
                revision = min(numbers)
                before = self._seen.get((result.searcher, key))
                if (
                    before is not None
                    and revision < before.revision
                    and not self.ledger.rewound(key, before.sent, result.received)
                ):
                    found.append(
                        f"{where}: {key} went back from r{before.revision} to r{revision} "
                        "with no rollback in between"
                    )
                self._seen[(result.searcher, key)] = Seen(max(numbers), result.sent)
            self.checked += 1
            self.hits += len(result.hits)
            self.violations.extend(found)
        return found

    def record(self, violations: Iterable[str]) -> None:
        """Violations found by a check of the searcher's own (the snapshot searcher's)."""
        with self._lock:
            self.violations.extend(violations)
