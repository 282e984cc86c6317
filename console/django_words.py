"""Words of Django's own admin templates that Django's Simplified Chinese catalogue does not
translate yet (Django 5.2): marked here so Canon's catalogue (locale/zh_Hans) carries them.
LOCALE_PATHS come before Django's catalogues, so Canon's translation is the one shown; nothing
imports this module, the catalogue's extraction reads it (devtools.catalogue)."""

from django.utils.translation import gettext_noop

DJANGO_WORDS = (
    gettext_noop("Model name"),  # admin/app_list.html, a table's hidden column header
    gettext_noop("Add link"),  # the same table's hidden headers
    gettext_noop("Change or view list link"),
)
