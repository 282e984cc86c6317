"""Canon's admin, one module per area (docs/ARCHITECTURE.md, "Admin"). Importing the package
registers every model admin."""

from kb.admin import chunks, documents, knowledge_bases, records
from kb.admin.scoping import (
    TenantScopedAdmin,
    groups_refused,
    may_read,
    request_reader,
    user_tenant_id,
    user_tenant_ids,
)

__all__ = [
    "TenantScopedAdmin",
    "chunks",
    "documents",
    "groups_refused",
    "knowledge_bases",
    "may_read",
    "records",
    "request_reader",
    "user_tenant_id",
    "user_tenant_ids",
]
