"""Canon's admin, one module per area (docs/ARCHITECTURE.md, "Admin"). Importing the package
registers every model admin; `scoping` holds what every admin shares (tenant and access-group
scoping, `TenantScopedAdmin`)."""

from console.admin import (
    api_keys,
    chunks,
    consistency,
    documents,
    evaluation,
    evaluation_gates,
    identity,
    knowledge_bases,
    records,
    sources,
    users,
)

__all__ = [
    "api_keys",
    "chunks",
    "consistency",
    "documents",
    "evaluation",
    "evaluation_gates",
    "identity",
    "knowledge_bases",
    "records",
    "sources",
    "users",
]
