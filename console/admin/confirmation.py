"""Confirmation pages: every admin action that changes what search serves shows what will change
(GET) and acts only on a POST with a reason, after its permission check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.translation import gettext, gettext_lazy

from console.admin.refusals import MissingPermission
from kb.services.base import ActionRefused

DOCUMENT_HISTORY = gettext_lazy("Why? Kept in the document's history.")
KNOWLEDGE_BASE_TIMELINE = gettext_lazy("Why? Kept in the knowledge base's timeline.")


class ReasonForm(forms.Form):
    reason = forms.CharField(
        label=gettext_lazy("Reason"),
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text=DOCUMENT_HISTORY,
    )
    expected = forms.IntegerField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, reason_help: Any = DOCUMENT_HISTORY, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["reason"].help_text = reason_help


def require(request: HttpRequest, perm: str) -> None:
    """Refuse (403, the admin's refusal page naming `perm` and the roles with it) unless the
    user has `perm`."""
    if not request.user.has_perm(perm):
        raise MissingPermission(perm)


def confirm_label(title: str) -> str:
    """The confirm button's words: "Yes, " and the title with only its first letter lowered, so
    a document's title reads as written ("Yes, approve revision 2 of Travel policy")."""
    return gettext("Yes, %(action)s") % {"action": f"{title[:1].lower()}{title[1:]}"}


def confirm(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    *,
    title: str,
    summary: dict[str, Any],
    expected: int | None,
    perform: Callable[[str, int | None], str],
    back: str,
    template: str = "admin/kb/confirm_action.html",
    danger: bool = False,
    reason_help: Any = DOCUMENT_HISTORY,
    refused: str | None = None,
) -> HttpResponse:
    """GET: the confirmation page. POST: validate the reason, perform, report, redirect back.
    `perform` gets the reason and the `expected` value the page was rendered with (a
    compare-and-set token, so a page left open does not act on a state it did not show).
    `reason_help` says where the reason is kept (the document's history, or the knowledge base's
    timeline for index-version actions). `refused`: where a refusal leads (default `back`): the
    page itself, when it shows what to do about the refusal (a quality gate's override)."""
    form = ReasonForm(request.POST or None, initial={"expected": expected}, reason_help=reason_help)
    if request.method == "POST" and form.is_valid():
        try:
            message = perform(form.cleaned_data["reason"], form.cleaned_data.get("expected"))
        except ActionRefused as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(refused or back)
        else:
            messages.success(request, message)
        return HttpResponseRedirect(back)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "summary": summary,
        "form": form,
        "back": back,
        "danger": danger,
        "confirm_label": confirm_label(title),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, template, context)
