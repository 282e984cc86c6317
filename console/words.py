"""The words for codes the models store, as the admin's pages name them: a task's status, a
build's state, a History action, a metadata field's type, a sync run's outcome. Each English word
is the code itself, so English pages read as before; other languages translate them. The pages'
filters (`console.templatetags.canon_words`) and the admin's Python both read them here."""

from __future__ import annotations

from typing import Any

from django.utils.translation import pgettext, pgettext_lazy

from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS

# The codes models store, as pages name them; each English word is the code itself.
TASK_STATUS = {
    "queued": pgettext_lazy("task status", "queued"),
    "running": pgettext_lazy("task status", "running"),
    "retry_wait": pgettext_lazy("task status", "retry_wait"),
    "succeeded": pgettext_lazy("task status", "succeeded"),
    "failed": pgettext_lazy("task status", "failed"),
    "dead": pgettext_lazy("task status", "dead"),
}
BUILD_STATE = {
    "pending": pgettext_lazy("build state", "pending"),
    "building": pgettext_lazy("build state", "building"),
    "ready": pgettext_lazy("build state", "ready"),
    "live": pgettext_lazy("build state", "live"),
    "superseded": pgettext_lazy("build state", "superseded"),
    "failed": pgettext_lazy("build state", "failed"),
}
# A History row's action (`kb.selectors.documents.document_history`).
HISTORY_ACTION = {
    "publish": pgettext_lazy("history action", "publish"),
    "approve": pgettext_lazy("history action", "approve"),
    "rollback": pgettext_lazy("history action", "rollback"),
    "delete": pgettext_lazy("history action", "delete"),
    "restore": pgettext_lazy("history action", "restore"),
    "retry": pgettext_lazy("history action", "retry"),
    "metadata set": pgettext_lazy("history action", "metadata set"),
    "deletion confirmed": pgettext_lazy("history action", "deletion confirmed"),
    "kept (not deleted)": pgettext_lazy("history action", "kept (not deleted)"),
}
FIELD_TYPE = {
    "string": pgettext_lazy("metadata type", "string"),
    "number": pgettext_lazy("metadata type", "number"),
    "date": pgettext_lazy("metadata type", "date"),
    "boolean": pgettext_lazy("metadata type", "boolean"),
    "string_list": pgettext_lazy("metadata type", "list of strings"),
}
# A sync run's counts and a problem's outcome (`sources.models.SyncRun`).
RUN_COUNT = {
    "new": pgettext_lazy("sync outcome", "new"),
    "changed": pgettext_lazy("sync outcome", "changed"),
    "unchanged": pgettext_lazy("sync outcome", "unchanged"),
    "restored": pgettext_lazy("sync outcome", "restored"),
    "deleted": pgettext_lazy("sync outcome", "deleted"),
    "failed": pgettext_lazy("sync outcome", "failed"),
    "skipped": pgettext_lazy("sync outcome", "skipped"),
    "not supported": pgettext_lazy("sync outcome", "not supported"),
    "unsupported": pgettext_lazy("sync outcome", "unsupported"),
}


# The roles' names as people read them (the groups keep their English names: `kb.roles`).
ROLE_WORDS = {
    CONTENT_MANAGERS: pgettext_lazy("role", "Content managers"),
    INDEX_ADMINS: pgettext_lazy("role", "Index admins"),
}


# Search modes (the API's names: `retrieval.search.engine.MODES`), as Test search names them.
SEARCH_MODE = {
    "hybrid": pgettext_lazy("search mode", "hybrid"),
    "vector": pgettext_lazy("search mode", "vector"),
    "keyword": pgettext_lazy("search mode", "keyword"),
}
# How a question's rank changed between two evaluation runs (`evaluation.selectors`).
RANK_CHANGE = {
    "gained": pgettext_lazy("rank change", "gained"),
    "lost": pgettext_lazy("rank change", "lost"),
    "up": pgettext_lazy("rank change", "up"),
    "down": pgettext_lazy("rank change", "down"),
    "same": pgettext_lazy("rank change", "same"),
    "missed": pgettext_lazy("rank change", "missed"),
    "added": pgettext_lazy("rank change", "added"),
    "removed": pgettext_lazy("rank change", "removed"),
}


def search_mode(code: str) -> str:
    return word(SEARCH_MODE, code)


def search_modes(codes: Any) -> str:
    """ "hybrid, keyword", in the page's language."""
    return pgettext("list separator", ", ").join(search_mode(code) for code in codes)


def figure_group(group: str) -> str:
    """A row of a run's figures: "all", a language code, or "tag: faq"."""
    if group == "all":
        return str(pgettext_lazy("figure group", "all questions"))
    if group.startswith("tag: "):
        return pgettext("figure group", "tag: %(tag)s") % {"tag": group[5:]}
    return group


def word(words: dict[str, Any], code: Any) -> str:
    """`code` in the active language's words, itself when unknown."""
    return str(words.get(str(code), code))


def build_state(code: str) -> str:
    return word(BUILD_STATE, code)


def role_words(role: str) -> str:
    return word(ROLE_WORDS, role)
