"""Writes of knowledge-base state, one module per sub-domain: `documents` (uploads, edits,
delete, restore, purge, retry), `publication` (the switch, approve, rollback), `index_versions`
(a new version, the swap and its rollback) and `retention`; `base` holds what they share."""
