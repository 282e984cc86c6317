"""The two admin roles, as Django groups: content managers publish, index admins approve and
undo. Created by migration kb.0006 and re-asserted by `canon_bootstrap`.

A role says what a user may do, never which documents: those are the user's tenant and the
access groups of their TenantMembership (`kb.access.reader_of_user`), the same for the admin
and the API. Managing a restricted document therefore takes holding one of its groups."""

from __future__ import annotations

from typing import Any

CONTENT_MANAGERS = "Content managers"
INDEX_ADMINS = "Index admins"

CONTENT_MANAGER_PERMISSIONS = [
    ("kb", "view_knowledgebase"),
    ("kb", "view_indexversion"),
    # the fields a knowledge base declares: content managers see them and set documents'
    # values (change_document); index admins declare, retype and delete them
    ("kb", "view_metadatafield"),
    ("kb", "add_document"),
    ("kb", "change_document"),
    ("kb", "view_document"),
    ("kb", "view_revision"),
    ("kb", "view_build"),
    ("kb", "view_publicationevent"),
    ("kb", "retry_build"),
    ("kb", "soft_delete_document"),
    ("kb", "restore_document"),
    ("ingestion", "view_ingestiontask"),
    # sources: content managers see them and their runs; index admins add, change and sync
    # them and confirm a run's deletions (migration sources.0002)
    ("sources", "view_source"),
    ("sources", "view_syncrun"),
    # evaluation: content managers see question sets, their questions and the runs' figures;
    # index admins write the sets and run evaluations (migration evaluation.0002)
    ("evaluation", "view_questionset"),
    ("evaluation", "view_question"),
    ("evaluation", "view_evaluationrun"),
    # quality gates: content managers see them; index admins set them and may swap in a
    # version a gate refuses, giving a reason (migration evaluation.0004)
    ("evaluation", "view_qualitygate"),
]
INDEX_ADMIN_PERMISSIONS = [
    *CONTENT_MANAGER_PERMISSIONS,
    ("kb", "change_knowledgebase"),
    ("kb", "add_metadatafield"),
    ("kb", "change_metadatafield"),
    ("kb", "delete_metadatafield"),
    ("kb", "approve_build"),
    ("kb", "rollback_document"),
    ("kb", "manage_index_versions"),
    ("ingestion", "view_outboxevent"),
    ("ingestion", "view_auditevent"),
    ("ingestion", "view_stageresult"),
    ("retrieval", "view_apikey"),
    ("retrieval", "add_apikey"),
    ("retrieval", "change_apikey"),
    ("sources", "add_source"),
    ("sources", "change_source"),
    ("sources", "sync_source"),
    ("evaluation", "add_questionset"),
    ("evaluation", "change_questionset"),
    ("evaluation", "delete_questionset"),
    ("evaluation", "add_question"),
    ("evaluation", "change_question"),
    ("evaluation", "delete_question"),
    ("evaluation", "run_evaluation"),
    ("evaluation", "add_qualitygate"),
    ("evaluation", "change_qualitygate"),
    ("evaluation", "delete_qualitygate"),
    ("evaluation", "override_quality_gate"),
]
ROLES = {CONTENT_MANAGERS: CONTENT_MANAGER_PERMISSIONS, INDEX_ADMINS: INDEX_ADMIN_PERMISSIONS}


def ensure_roles(group_model: Any, permission_model: Any, *, skip_missing: bool = False) -> None:
    """Create or update the groups (idempotent). Takes the models so a migration can pass its
    historical ones; the permissions must exist already, unless `skip_missing` (a migration
    that runs before a model of a later one exists: that later migration calls this again,
    e.g. kb.0020 for MetadataField)."""
    for name, codes in ROLES.items():
        group, _ = group_model.objects.get_or_create(name=name)
        permissions = [
            permission_model.objects.filter(content_type__app_label=app, codename=codename).first()
            if skip_missing
            else permission_model.objects.get(content_type__app_label=app, codename=codename)
            for app, codename in codes
        ]
        group.permissions.set([p for p in permissions if p is not None])


def roles_with(perm: str) -> list[str]:
    """The roles that grant `perm` ("app_label.codename"), in ROLES' order: what a refusal tells
    the user to ask for."""
    app, _, codename = perm.partition(".")
    return [name for name, codes in ROLES.items() if (app, codename) in codes]


def role_noun(role: str) -> str:
    """A role's name for one person: "Index admins" -> "an index admin"."""
    singular = role[:-1] if role.endswith("s") else role
    singular = singular[0].lower() + singular[1:]
    return f"{'an' if singular[0] in 'aeiou' else 'a'} {singular}"
