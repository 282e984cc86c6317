"""Permissions as the admin's pages name them, in the reader's language.

Django stores a permission's name in English when it migrates ("Can add document", built from
the model's untranslated name) and has no catalogue entry for it, so its own user and group
pages list "Can add …" whatever the language. Here the four default permissions are worded
from the action and the model's name as the page's language says them; a model's own
permission ("Can approve a ready build") is looked up by its English name, which the models
mark for translation."""

from __future__ import annotations

from django.apps import apps
from django.contrib.auth.models import Permission
from django.db.models import Model
from django.utils.functional import Promise
from django.utils.translation import gettext, gettext_noop, pgettext_lazy

# Django's four default permissions, by the codename's first word.
DEFAULT_ACTIONS = {
    "add": pgettext_lazy("permission", "Can add %(model)s"),
    "change": pgettext_lazy("permission", "Can change %(model)s"),
    "delete": pgettext_lazy("permission", "Can delete %(model)s"),
    "view": pgettext_lazy("permission", "Can view %(model)s"),
}
# Canon's bookkeeping models that do not mark their names (Django's names them from the class):
# marked here so their permissions read in the page's language too.
MODEL_WORDS = (
    gettext_noop("posting"),
    gettext_noop("lexical stat"),
    gettext_noop("lexical share"),
    gettext_noop("build seal"),
    gettext_noop("audit cursor"),
    gettext_noop("audit slice"),
    gettext_noop("embedding cache"),
    gettext_noop("idempotency record"),
)


def model_words(model: type[Model]) -> str:
    """A model's name in the active language: its marked verbose name, else the catalogue's
    words for its English name."""
    name = model._meta.verbose_name
    return str(name) if isinstance(name, Promise) else gettext(model._meta.verbose_name_raw)


def permission_words(permission: Permission) -> str:
    """What `permission` lets a user do, in the active language ("可以添加文档")."""
    model = permission.content_type.model_class()
    action, _, model_name = permission.codename.partition("_")
    if (
        model is not None
        and action in DEFAULT_ACTIONS
        and model_name == model._meta.model_name
        and permission.name == f"Can {action} {model._meta.verbose_name_raw}"
    ):
        return str(DEFAULT_ACTIONS[action]) % {"model": model_words(model)}
    return gettext(permission.name)


def permission_label(permission: Permission) -> str:
    """A permission in a list of them: its app, its model and what it allows, as Django's own
    `str(permission)` orders them ("知识 | 文档 | 可以添加文档")."""
    content_type = permission.content_type
    model = content_type.model_class()
    if model is None:  # a model since removed: its content type's own words
        return f"{content_type} | {permission_words(permission)}"
    app = apps.get_app_config(model._meta.app_label).verbose_name
    return f"{app} | {model_words(model)} | {permission_words(permission)}"
