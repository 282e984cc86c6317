"""Permission refusals in the admin: an admin page (403) that says which permission is missing,
which role grants it, and links back, instead of the server's bare "403 Forbidden".

`MissingPermission` is what `console.admin.confirmation.require` raises; `permission_denied` is the
project's handler403 (config/urls.py): under /admin/ it renders templates/admin/403.html with the
admin's context, elsewhere Django's default answer."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.models import Permission
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext, gettext_lazy
from django.views import defaults

from console.permission_words import permission_words
from console.words import role_words
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ROLES, role_noun, roles_with


class MissingPermission(PermissionDenied):
    """The user lacks `perm` ("app_label.codename") for what they tried."""

    def __init__(self, perm: str) -> None:
        super().__init__(gettext("You need the permission %(perm)s.") % {"perm": perm})
        self.perm = perm


def permission_name(perm: str) -> str:
    """Django's description of a permission ("Can approve a ready build"), else its code; in
    the active language (`console.permission_words`)."""
    app, _, codename = perm.partition(".")
    permission = (
        Permission.objects.select_related("content_type")
        .filter(content_type__app_label=app, codename=codename)
        .first()
    )
    return permission_words(permission) if permission else perm


# Who to ask, for one person of a role.
ROLE_NOUNS = {
    CONTENT_MANAGERS: gettext_lazy("a content manager"),
    INDEX_ADMINS: gettext_lazy("an index admin"),
}


def roles_text(roles: list[str], *, last: Any) -> str:
    """ "Content managers and Index admins": the roles in words, joined as a sentence would."""
    words = [role_words(role) for role in roles]
    if len(words) < 2:
        return "".join(words)
    return str(last) % {"first": gettext(", ").join(words[:-1]), "last": words[-1]}


def back_url(request: HttpRequest) -> str:
    """Where "Go back" leads: the referring page on this site, else the admin's front page."""
    referer = request.META.get("HTTP_REFERER", "")
    return (
        referer
        if referer
        and referer != request.build_absolute_uri()
        and url_has_allowed_host_and_scheme(
            referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
        else reverse("admin:index")
    )


def refusal_context(request: HttpRequest, exception: Exception | None) -> dict[str, Any]:
    """What the refusal page says: the missing permission, the roles that grant it, the user's
    own roles, and where to go back to."""
    perm = getattr(exception, "perm", None)
    granted_by = roles_with(perm) if perm else []
    user = request.user
    own = sorted(
        user.groups.filter(name__in=list(ROLES)).values_list("name", flat=True)
        if user.is_authenticated
        else []
    )
    back = back_url(request)
    nouns = [str(ROLE_NOUNS.get(r) or role_noun(r)) for r in granted_by]
    return {
        "perm": perm,
        "perm_name": permission_name(perm) if perm else "",
        "granted_by": granted_by,
        "granted_by_words": roles_text(granted_by, last=gettext_lazy("%(first)s and %(last)s")),
        "ask": gettext(" or ").join(nouns),
        "own_roles": own,
        "own_roles_words": roles_text(own, last=gettext_lazy("%(first)s, %(last)s"))
        or gettext("none"),
        "back": back,
    }


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler403: an admin page under /admin/ (status 403), Django's default elsewhere."""
    admin_prefix = reverse("admin:index")
    if not request.path.startswith(admin_prefix) or not request.user.is_authenticated:
        return defaults.permission_denied(request, exception or PermissionDenied())
    context = {
        **admin.site.each_context(request),
        "title": gettext("You may not do this"),
        **refusal_context(request, exception),
    }
    response = TemplateResponse(request, "admin/403.html", context, status=403)
    return response.render()


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler404: under /admin/, for a signed-in user, an admin page (status 404) with the
    admin's header and a way home; Django's default elsewhere (the API answers JSON itself)."""
    admin_prefix = reverse("admin:index")
    if not request.path.startswith(admin_prefix) or not request.user.is_authenticated:
        return defaults.page_not_found(request, exception or Http404())
    context = {
        **admin.site.each_context(request),
        "title": gettext("Page not found"),
        "path": request.path,
        "back": "" if back_url(request) == admin_prefix else back_url(request),
    }
    response = TemplateResponse(request, "admin/404.html", context, status=404)
    return response.render()
