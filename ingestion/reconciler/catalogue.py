"""The catalogue: each check with the level it runs at, the finding kind its repair handles,
and the repair."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ingestion.reconciler.documents import (
    find_complete_build_not_switched,
    find_deleted_with_chunks,
    find_desired_revision_without_build,
    find_invariant_violations,
    find_shard_disagreements,
    find_visibility_violations,
    repair_complete_build_not_switched,
    repair_deleted_with_chunks,
    repair_desired_revision_without_build,
)
from ingestion.reconciler.events import (
    find_outbox_lagging,
    find_queued_without_event,
    find_sent_never_claimed,
    repair_outbox_lagging,
    repair_queued_without_event,
    repair_sent_never_claimed,
)
from ingestion.reconciler.files import (
    find_orphan_files,
    find_stored_file_missing,
    repair_orphan_file,
)
from ingestion.reconciler.findings import (
    DOCUMENT,
    EVENT,
    SHARD,
    Finding,
    Repair,
)


@dataclass(frozen=True)
class Check:
    """One row of the catalogue: the level it runs at, the finding kind its repair handles (the
    kind an escalated anomaly is recorded under, `anomaly:<kind>`), the check and its repair."""

    level: str
    kind: str
    find: Callable[[], Iterator[Finding]]
    repair: Repair | None


CATALOGUE: list[Check] = [
    Check(EVENT, "queued_without_event", find_queued_without_event, repair_queued_without_event),
    Check(EVENT, "sent_never_claimed", find_sent_never_claimed, repair_sent_never_claimed),
    Check(
        DOCUMENT,
        "complete_build_not_switched",
        find_complete_build_not_switched,
        repair_complete_build_not_switched,
    ),
    Check(
        DOCUMENT,
        "desired_revision_without_build",
        find_desired_revision_without_build,
        repair_desired_revision_without_build,
    ),
    Check(DOCUMENT, "deleted_with_chunks", find_deleted_with_chunks, repair_deleted_with_chunks),
    Check(EVENT, "outbox_lagging", find_outbox_lagging, repair_outbox_lagging),
    Check(DOCUMENT, "orphan_file", find_orphan_files, repair_orphan_file),
    # A person restores the file.
    Check(DOCUMENT, "stored_file_missing", find_stored_file_missing, None),
    # Never fixed automatically; these checks yield several kinds (visibility_violation, ...).
    Check(DOCUMENT, "visibility_violation", find_visibility_violations, None),
    Check(DOCUMENT, "invariant_violation", find_invariant_violations, None),
    Check(SHARD, "shard_disagreement", find_shard_disagreements, None),
]


# The repair of each finding kind, by the kind an escalation is recorded under.
REPAIRS: dict[str, Repair] = {check.kind: check.repair for check in CATALOGUE if check.repair}
