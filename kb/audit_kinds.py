"""The kinds of AuditEvent that record what a person did and why, beyond the pointer changes
(PublicationEvent): written by the services that act, read by a document's History
(`kb.selectors.documents.document_history`) and the knowledge base's timeline (`kb.timeline`).
Named once here, so a writer and its readers cannot drift apart.

- METADATA_SET: one document's metadata set by the document list's bulk edit
  (`kb.services.metadata.documents_metadata_set`); subject the document, `action` what changed,
  `details["reason"]`.
- SYNC_DELETIONS_CONFIRMED / SYNC_DELETIONS_KEPT: a person's answer to the deletions a sync run
  held (`sources.services.runs`); subject the run, `action` what was done, `details["reason"]`
  and `details["documents"]` (the ids of the documents it deleted or kept), so each document's
  History finds the answer that concerned it.
- QUALITY_GATE_OVERRIDDEN: a person swapped in an index version the knowledge base's quality
  gate refused (`evaluation.gate`); subject the version swapped in, `action` the figures,
  `details["reason"]`, `details["previous_id"]`.
- QUALITY_GATE_CHANGED: the quality gate set, changed or removed
  (`evaluation.services.gates`); subject the gate's knowledge base, `action` what it is now.
  QUALITY_GATE_OVERRIDDEN also records a calibration adopted although the gate refused it
  (subject_type "calibration").
- FUSION_CALIBRATION_ADOPTED / FUSION_CALIBRATION_ROLLED_BACK: search's fusion for the
  knowledge base set to a calibration on its own questions, or back to the shipped default
  (`evaluation.services.calibration`); subject the calibration, `details["reason"]`,
  `details["quality_gate"]` (the verdict an adoption passed).
"""

from __future__ import annotations

METADATA_SET = "metadata_set"
SYNC_DELETIONS_CONFIRMED = "sync_deletions_confirmed"
SYNC_DELETIONS_KEPT = "sync_deletions_kept"
SYNC_ANSWERS = (SYNC_DELETIONS_CONFIRMED, SYNC_DELETIONS_KEPT)
QUALITY_GATE_OVERRIDDEN = "quality_gate_overridden"
QUALITY_GATE_CHANGED = "quality_gate_changed"
FUSION_CALIBRATION_ADOPTED = "fusion_calibration_adopted"
FUSION_CALIBRATION_ROLLED_BACK = "fusion_calibration_rolled_back"
