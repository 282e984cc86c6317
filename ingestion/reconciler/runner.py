"""The reconciler: finds what leases and retries did not heal, and repairs it through the normal
protocols (outbox, tasks, the switch) — never around them.

Each pass is a singleton (advisory lock) and works in three levels (seed 002; `kb.audit`), each
bounded, so a pass costs the same at 50M chunks as at 50k:

- event level, every pass: outbox lag, waiting tasks whose event died or was never claimed, and
  the figures (pending events, oldest pending age, dead letters of waiting tasks);
- document level: the state checks below in batches over indexed columns, the seal queue (each
  verified build read in full once, about RECONCILER_SEAL_CHUNKS chunks a pass) and one slice of
  the document walk (RECONCILER_SLICE_DOCUMENTS documents, every invariant of `kb_verify`);
- shard level: RECONCILER_SHARD_BUILDS builds' summaries per pass, read chunk by chunk only in
  the windows where they disagree (at most RECONCILER_DEEP_WINDOWS).

Every finding is recorded as an AuditEvent `anomaly:<kind>`, once per subject and pass. A subject
gets at most MAX_REPAIRS automatic repairs; after that it is escalated to the manual queue in the
admin and left alone. Visibility violations and damaged chunks are never repaired
automatically: they are escalated at once. The pass's figures per level are in its
`reconciler_pass` AuditEvent."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db.models.functions import Now

from ingestion.reconciler.catalogue import CATALOGUE, REPAIRS
from ingestion.reconciler.events import (
    event_figures,
)
from ingestion.reconciler.findings import (
    EVENT,
    MAX_REPAIRS,
    Finding,
    Repair,
    pass_figures,
)
from kb import locks
from kb.services.retention import retention_collect
from work.models import AuditEvent

logger = logging.getLogger(__name__)


RECONCILER_LOCK_KEY = 0x43616E6F6E02


def _previous(finding: Finding) -> Any:
    events = AuditEvent.objects.filter(
        kind=f"anomaly:{finding.kind}", subject_type=finding.subject_type
    )
    if finding.subject_type == "file":
        return events.filter(details__detail=finding.detail)
    return events.filter(subject_id=finding.subject_id)


def _handle(finding: Finding, repair: Repair | None) -> str:
    """Repair (bounded) or escalate one finding, and record it."""
    previous = _previous(finding)
    if previous.filter(escalated=True, resolved_at__isnull=True).exists():
        return "already escalated"
    attempts = previous.count() + 1
    escalate = repair is None or attempts > MAX_REPAIRS
    action = "escalated for a person to look at" if escalate or repair is None else repair(finding)
    AuditEvent.objects.create(
        kind=f"anomaly:{finding.kind}",
        subject_type=finding.subject_type,
        subject_id=finding.subject_id if finding.subject_type != "file" else None,
        kb_id=finding.kb_id,
        action=action,
        attempts=attempts,
        escalated=escalate,
        details={"detail": finding.detail},
    )
    if escalate:
        logger.error(
            "anomaly escalated: %s %s: %s", finding.kind, finding.subject_id, finding.detail
        )
    return action


def reconcile() -> dict[str, int]:
    """One pass over the catalogue; returns findings per kind. A second reconciler running at the
    same time does nothing (advisory lock)."""
    counts: dict[str, int] = {}
    with locks.singleton(RECONCILER_LOCK_KEY) as held:
        if not held:
            return counts
        for level in pass_figures.values():
            level.clear()
        pass_figures[EVENT].update(event_figures())
        seen: set[tuple[str, str, int, str]] = set()
        documents: set[int] = set()
        for check in CATALOGUE:
            started = time.perf_counter()
            for finding in list(check.find()):
                subject = (finding.kind, finding.subject_type, finding.subject_id, finding.detail)
                if finding.subject_type != "file":
                    subject = (*subject[:3], "")
                if subject in seen or (
                    finding.kind == "invariant_violation" and finding.document_id in documents
                ):
                    continue  # found this pass already, by another level
                seen.add(subject)
                if finding.document_id is not None:
                    documents.add(finding.document_id)
                _handle(finding, check.repair)
                counts[finding.kind] = counts.get(finding.kind, 0) + 1
            spent = (
                pass_figures[check.level].get("ms", 0.0) + (time.perf_counter() - started) * 1000
            )
            pass_figures[check.level]["ms"] = round(spent, 1)
        collected = retention_collect()
        if collected:
            counts["retention_collected_chunks"] = collected
        AuditEvent.objects.create(
            kind="reconciler_pass",
            subject_type="reconciler",
            action=str(counts),
            details={**counts, "levels": pass_figures},
        )
    return counts


def anomaly_retry(*, event_id: int, actor: object = None) -> str:
    """From the manual queue: close the escalation and run one more repair now."""
    event = AuditEvent.objects.get(pk=event_id, escalated=True)
    AuditEvent.objects.filter(pk=event.pk).update(resolved_at=Now())
    kind = event.kind.removeprefix("anomaly:")
    repair = REPAIRS.get(kind)
    if repair is None:
        return "this anomaly has no automatic repair; fix it by hand"
    finding = Finding(
        kind,
        event.subject_type,
        event.subject_id or 0,
        event.kb_id,
        str(event.details.get("detail", "")),
    )
    return repair(finding)


def anomaly_dismiss(*, event_id: int, reason: str, actor: object = None) -> None:
    AuditEvent.objects.filter(pk=event_id, escalated=True).update(
        resolved_at=Now(), action=f"dismissed: {reason}"
    )
