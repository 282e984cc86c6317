"""The reconciler: finds what leases and retries did not heal and repairs it through the normal
protocols. `runner` runs a pass over the `catalogue`; the checks are `events`, `documents` and
`files`; `findings` is what they share. To add a check: docs/ARCHITECTURE.md, "Recipes"."""
