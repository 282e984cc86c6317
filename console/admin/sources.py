"""Sources and their sync runs in the admin.

A source's page is its form (`source_form`: the kind's settings as inputs, credentials as
password inputs never filled in, saved only through `source_save`) with *Sync now* and
*Pause*/*Resume* (`source_actions`, behind confirmation pages) and its recent runs. A run's page
is read-only: a live progress bar (polling `run_progress`), its counts, the deletion note, the
time split, the per-item problems and, while it holds deletions, *Confirm deletions* and *Keep
documents*.

Index admins add, change and sync sources; content managers see sources and runs only (the
roles of `kb.roles`). Both admins are tenant-scoped through the source's knowledge base."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import capfirst
from django.utils.translation import gettext, gettext_lazy, ngettext, pgettext

from console.admin import source_actions
from console.admin.scoping import ReadOnlyAdmin, TenantScopedAdmin
from console.admin.source_form import CREDENTIAL_PREFIX, SourceForm, kind_fields, setting_words
from console.admin.sync_words import deletion_note_words, problem_words, run_error_words
from kb.models import KnowledgeBase
from sources.kinds.registry import KINDS
from sources.models import Source, SourceItem, SyncRun
from sources.selectors import run_progress, run_time_split, sources_of_kb, sync_answer

RECENT_RUNS = 10
COUNTS = (
    "new",
    "changed",
    "unchanged",
    "restored",
    "deleted",
    "failed",
    "skipped",
    "unsupported",
)


def _latest_run() -> QuerySet[SyncRun]:
    return SyncRun.objects.filter(source=OuterRef("pk")).order_by("-created_at", "-pk")


def run_state_html(state: str, label: str, url: str | None = None) -> str:
    """A run's state as a small badge (the colours of `_run_styles.html`), linked if `url`."""
    badge = format_html('<span class="canon-run-state canon-run-{}">{}</span>', state, label)
    return format_html('<a href="{}">{}</a>', url, badge) if url else badge


@admin.register(Source)
class SourceAdmin(TenantScopedAdmin):
    tenant_path = "kb__tenant_id"
    form = SourceForm
    list_display = [
        "name",
        "kind",
        "knowledge_base",
        "state",
        "schedule",
        "last_run",
        "runs_link",
    ]
    list_filter = ["kb", "kind", "enabled"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ("name",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        latest = _latest_run()
        return (
            super()
            .get_queryset(request)
            .select_related("kb")
            .annotate(
                last_run_id=Subquery(latest.values("pk")[:1]),
                last_run_state=Subquery(latest.values("state")[:1]),
            )
        )

    # --- the list -------------------------------------------------------------------------

    @admin.display(description=gettext_lazy("knowledge base"), ordering="kb__slug")
    def knowledge_base(self, source: Source) -> str:
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:kb_knowledgebase_home", args=[source.kb_id]),
            source.kb,
        )

    @admin.display(description=gettext_lazy("state"), ordering="enabled")
    def state(self, source: Source) -> str:
        return (
            pgettext("source state", "enabled")
            if source.enabled
            else pgettext("source state", "paused")
        )

    @admin.display(description=gettext_lazy("schedule"), ordering="sync_every_minutes")
    def schedule(self, source: Source) -> str:
        return source_actions.schedule_text(source)

    @admin.display(description=gettext_lazy("last run"))
    def last_run(self, source: Source) -> str:
        run_id = getattr(source, "last_run_id", None)
        state = getattr(source, "last_run_state", None)
        if run_id is None or state is None:
            return gettext("never synced")
        label = str(SyncRun.State(state).label)
        return run_state_html(state, label, reverse("admin:sources_syncrun_change", args=[run_id]))

    @admin.display(description=gettext_lazy("runs"))
    def runs_link(self, source: Source) -> str:
        return format_html('<a href="{}">{}</a>', _runs_url(source), gettext("Runs"))

    # --- the page ---------------------------------------------------------------------------

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        """The common fields, then each kind's settings and credentials (on a new source, every
        kind's, the page's script showing the chosen one's); read-only for viewers."""
        if obj is not None and not self.has_change_permission(request, obj):
            return self._view_fieldsets(obj)
        fieldsets: list[Any] = [(None, {"fields": ["kb", "kind", "name", "slug", "enabled"]})]
        for kind in [obj.kind] if obj is not None else list(KINDS):
            fields = kind_fields(kind)
            secrets = [f for f in fields if f.startswith(CREDENTIAL_PREFIX)]
            fieldsets.append(
                (
                    gettext("%(kind)s settings") % {"kind": capfirst(str(Source.Kind(kind).label))},
                    {
                        "fields": fields,
                        "classes": ["canon-kind-settings", f"canon-kind-{kind}"],
                        "description": gettext(
                            "Credentials are stored encrypted and never shown again."
                        )
                        if secrets
                        else "",
                    },
                )
            )
        fieldsets += [
            (gettext("What it takes"), {"fields": ["include", "exclude"]}),
            (gettext("The documents it brings"), {"fields": ["access_groups", "metadata_map"]}),
            (
                gettext("Schedule and deletions"),
                {
                    "fields": ["sync_every_minutes", "delete_threshold_percent"]
                    + (["next_sync", "documents"] if obj is not None else [])
                },
            ),
        ]
        return fieldsets

    def _view_fieldsets(self, obj: Source) -> Any:
        return [
            (None, {"fields": ["kb", "kind", "name", "slug", "state"]}),
            (gettext("Settings"), {"fields": ["settings", "credentials"]}),
            (gettext("What it takes"), {"fields": ["included", "excluded"]}),
            (gettext("The documents it brings"), {"fields": ["groups", "mapping"]}),
            (
                gettext("Schedule and deletions"),
                {"fields": ["schedule", "threshold", "next_sync", "documents"]},
            ),
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [] if obj is None else ["kb", "kind", "next_sync", "documents"]

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        # The form declares its inputs itself (per kind): none are generated from the model.
        kwargs["fields"] = []
        form = super().get_form(request, obj, change, **kwargs)
        # A subclass per request: a class attribute would be shared across threads.
        return type(
            form.__name__,
            (form,),
            {"request": request, "kb_queryset": self.scoped_queryset(request, KnowledgeBase)},
        )

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """`?kb=` and `?kind=` preselect (the knowledge base's home links here); with one
        knowledge base, it is preselected."""
        initial: dict[str, Any] = dict(super().get_changeform_initial_data(request))
        only = list(self.scoped_queryset(request, KnowledgeBase).values_list("pk", flat=True)[:2])
        if len(only) == 1:
            initial.setdefault("kb", only[0])
        return initial

    def save_form(self, request: HttpRequest, form: Any, change: bool) -> Any:
        """The source `source_save` wrote while the form was cleaned."""
        return form.saved

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        pass  # saved by `source_save` (SourceForm.clean)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass  # a source has no related rows to save here

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # its documents would lose their source: not offered

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        source = self.get_object(request, unquote(object_id))
        extra = {**(extra_context or {}), "show_save_and_add_another": False}
        if source is not None:
            runs = list(SyncRun.objects.filter(source=source).order_by("-created_at", "-pk"))
            extra.update(
                source=source,
                recent_runs=[
                    (run, run_progress(run), run.state in SyncRun.OPEN_STATES)
                    for run in runs[:RECENT_RUNS]
                ],
                more_runs=len(runs) > RECENT_RUNS,
                runs_url=_runs_url(source),
                can_sync=request.user.has_perm("sources.sync_source"),
                can_pause=request.user.has_perm("sources.change_source"),
            )
        return super().change_view(request, object_id, form_url, extra)

    def get_urls(self) -> list[Any]:
        wrap = self.bound_view
        return [
            path(
                "<path:object_id>/sync/",
                wrap(source_actions.sync_view),
                name="sources_source_sync",
            ),
            path(
                "<path:object_id>/pause/",
                wrap(source_actions.pause_view),
                name="sources_source_pause",
            ),
            path(
                "<path:object_id>/resume/",
                wrap(source_actions.resume_view),
                name="sources_source_resume",
            ),
            *super().get_urls(),
        ]

    # --- read-only fields (the page of a viewer, and a few for everyone) ---------------------

    @admin.display(description=gettext_lazy("settings"))
    def settings(self, source: Source) -> str:
        rows = [(setting_words(key), value) for key, value in (source.config or {}).items()]
        return format_html_join("", "<div>{}: <code>{}</code></div>", rows) or "—"

    @admin.display(description=gettext_lazy("credentials"))
    def credentials(self, source: Source) -> str:
        if not KINDS[source.kind].SECRET_FIELDS:
            return gettext("none needed")
        return gettext("stored, never shown") if source.has_credentials else gettext("none stored")

    @admin.display(description=gettext_lazy("include"))
    def included(self, source: Source) -> str:
        return _lines(source.include, empty=gettext("every path"))

    @admin.display(description=gettext_lazy("exclude"))
    def excluded(self, source: Source) -> str:
        return _lines(source.exclude, empty=gettext("nothing"))

    @admin.display(description=gettext_lazy("access groups"))
    def groups(self, source: Source) -> str:
        return ", ".join(source.access_groups) or gettext("none: everyone in the tenant reads them")

    @admin.display(description=gettext_lazy("metadata map"))
    def mapping(self, source: Source) -> str:
        rows = list((source.metadata_map or {}).items())
        return format_html_join("", "<div><code>{}</code> → {}</div>", rows) or "—"

    @admin.display(description=gettext_lazy("next sync"))
    def next_sync(self, source: Source) -> str:
        """When the schedule starts the next run; never a time for a paused source (none starts
        until it is resumed) nor for one without a schedule."""
        return source_actions.next_sync_text(source)

    @admin.display(description=gettext_lazy("deletion threshold"))
    def threshold(self, source: Source) -> str:
        return gettext("%(n)s %% of the source's documents") % {
            "n": source.delete_threshold_percent
        }

    @admin.display(description=gettext_lazy("documents"))
    def documents(self, source: Source) -> str:
        items = SourceItem.objects.filter(source=source)
        held = items.filter(document__isnull=False, gone_at__isnull=True).count()
        gone = items.filter(gone_at__isnull=False).count()
        text = ngettext(
            "%(n)s document from this source", "%(n)s documents from this source", held
        ) % {"n": held}
        if gone:
            text += gettext("; %(n)s deleted since they left it") % {"n": gone}
        return text


def kb_sources(request: HttpRequest, kb: KnowledgeBase) -> dict[str, Any] | None:
    """The Sources section of a knowledge base's home: each source, its last run's state, links;
    None for a user who may not view sources."""
    if not request.user.has_perm("sources.view_source"):
        return None
    rows = []
    for source in sources_of_kb(kb.pk):
        run_id = getattr(source, "last_run_id", None)
        state = getattr(source, "last_run_state", None)
        rows.append(
            {
                "source": source,
                "url": source_actions.source_url(source),
                "reads": source_actions.location_text(source),
                "schedule": source_actions.schedule_text(source),
                "run": run_state_html(
                    state,
                    str(SyncRun.State(state).label),
                    reverse("admin:sources_syncrun_change", args=[run_id]),
                )
                if run_id and state
                else "",
                "finished": getattr(source, "last_run_finished", None),
            }
        )
    add = reverse("admin:sources_source_add") + f"?kb={kb.pk}"
    return {
        "rows": rows,
        "add_url": add if request.user.has_perm("sources.add_source") else "",
        "list_url": f"{reverse('admin:sources_source_changelist')}?kb__id__exact={kb.pk}",
    }


def _lines(values: list[str], *, empty: str) -> str:
    return format_html_join("", "<div><code>{}</code></div>", ((v,) for v in values)) or empty


def _runs_url(source: Source) -> str:
    return f"{reverse('admin:sources_syncrun_changelist')}?source__id__exact={source.pk}"


RUN_FIELDS = (
    "source_link",
    "state_badge",
    "trigger",
    "requested_by",
    "created_at",
    "started_at",
    "finished_at",
    "error_words",
    "confirmed_by",
    "confirmed_at",
)


@admin.register(SyncRun)
class SyncRunAdmin(ReadOnlyAdmin):
    """Runs, read-only: what each did, and the answer to the deletions one holds."""

    tenant_path = "source__kb__tenant_id"
    list_display = [
        "run",
        "source",
        "state_badge",
        "trigger",
        *COUNTS,
        "created_at",
        "finished_at",
    ]
    list_display_links = ["run"]
    # by knowledge base: the home's tile of held deletions links to its runs awaiting an answer
    list_filter = ["source__kb", "source", "state", "trigger"]
    list_select_related = ["source__kb"]
    ordering = ["-created_at", "-pk"]
    fields = RUN_FIELDS
    readonly_fields = RUN_FIELDS

    @admin.display(description=gettext_lazy("run"), ordering="pk")
    def run(self, run: SyncRun) -> str:
        return gettext("Run %(id)s") % {"id": run.pk}

    @admin.display(description=gettext_lazy("state"), ordering="state")
    def state_badge(self, run: SyncRun) -> str:
        return run_state_html(run.state, run.get_state_display())

    @admin.display(description=gettext_lazy("error"))
    def error_words(self, run: SyncRun) -> str:
        return run_error_words(run) or self.get_empty_value_display()

    @admin.display(description=gettext_lazy("source"))
    def source_link(self, run: SyncRun) -> str:
        return format_html(
            '<a href="{}">{}</a> <span class="canon-quiet">({}, {})</span>',
            source_actions.source_url(run.source),
            run.source,
            run.source.get_kind_display(),
            run.source.kb,
        )

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        run = self.get_object(request, unquote(object_id))
        extra = dict(extra_context or {})
        if run is not None:
            awaiting = run.state == SyncRun.State.AWAITING_CONFIRMATION
            extra.update(
                run=run,
                progress=run_progress(run),
                is_open=run.state in SyncRun.OPEN_STATES,
                awaiting=awaiting,
                deletions=source_actions.pending_deletions(request, run) if awaiting else None,
                can_answer=awaiting and request.user.has_perm("sources.sync_source"),
                answer=sync_answer(run) if run.confirmed_at is not None else None,
                times=run_time_split(run),
                run_error=run_error_words(run),
                deletion_note=deletion_note_words(run),
                problems=[
                    {**problem, "words": problem_words(problem)} for problem in run.problems or []
                ],
                title=gettext("Sync run %(id)s of %(source)s")
                % {"id": run.pk, "source": run.source},
            )
        return super().change_view(request, object_id, form_url, extra)

    def get_urls(self) -> list[Any]:
        wrap = self.bound_view
        return [
            path(
                "<path:object_id>/progress/",
                wrap(source_actions.run_progress_view),
                name="sources_syncrun_progress",
            ),
            path(
                "<path:object_id>/confirm-deletions/",
                wrap(source_actions.confirm_deletions_view),
                name="sources_syncrun_confirm",
            ),
            path(
                "<path:object_id>/keep-documents/",
                wrap(source_actions.keep_documents_view),
                name="sources_syncrun_keep",
            ),
            *super().get_urls(),
        ]
