"""The source's add and change form: the common fields, then one input per setting its kind
declares (`CONFIG_FIELDS`) and a password input per credential (`SECRET_FIELDS`), never filled
in: a stored credential is kept unless a new one is typed.

The form is saved by `source_save` and nothing else, and it is saved while the form is cleaned
(inside the admin view's transaction): every refusal of the service (`SourceInvalid`, naming its
field; its kind's refusal of a setting among them) is shown on that field in the person's
language, with the user's input kept, instead of a bare error page. The model's own validation
is not run: the service is the one check."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.postgres.forms import SimpleArrayField
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext, gettext_lazy, pgettext_lazy

from console.admin.scoping import groups_refused, request_reader
from kb.failures import error_words
from kb.metadata import field_specs
from kb.models import KnowledgeBase
from sources.kinds.base import Kind
from sources.kinds.registry import KINDS
from sources.models import Source
from sources.secrets import SecretsUnavailable
from sources.services.sources import SourceInvalid, source_save

CONFIG_PREFIX = "config__"
CREDENTIAL_PREFIX = "credential__"
STORED_HINT = gettext_lazy(
    "Stored, never shown: leave empty to keep it, or type a new one to replace it."
)
NEW_HINT = gettext_lazy("Stored encrypted and never shown again.")
# The kinds' settings and credentials as the form names them (their keys are the API's).
SETTING_WORDS = {
    "path": pgettext_lazy("source setting", "path"),
    "url": pgettext_lazy("source setting", "url"),
    "branch": pgettext_lazy("source setting", "branch"),
    "endpoint_url": pgettext_lazy("source setting", "endpoint url"),
    "bucket": pgettext_lazy("source setting", "bucket"),
    "prefix": pgettext_lazy("source setting", "prefix"),
    "region": pgettext_lazy("source setting", "region"),
    "tags_each_sync": pgettext_lazy("source setting", "tags each sync"),
    "start_url": pgettext_lazy("source setting", "start url"),
    "sitemap_url": pgettext_lazy("source setting", "sitemap url"),
    "max_depth": pgettext_lazy("source setting", "max depth"),
    "max_pages": pgettext_lazy("source setting", "max pages"),
    "delay_seconds": pgettext_lazy("source setting", "delay seconds"),
    "username": pgettext_lazy("source setting", "username"),
    "password": pgettext_lazy("source setting", "password"),
    "access_key_id": pgettext_lazy("source setting", "access key id"),
    "secret_access_key": pgettext_lazy("source setting", "secret access key"),
}
SETTING_HELP = {
    "tags_each_sync": gettext_lazy(
        "yes: read every object's tags at each sync (one more request an object), so a tag "
        "change alone updates the document's metadata. Empty or no: tags are read when the "
        "bytes change."
    ),
}


def config_field(kind: str, name: str) -> str:
    return f"{CONFIG_PREFIX}{kind}__{name}"


def secret_field(kind: str, name: str) -> str:
    return f"{CREDENTIAL_PREFIX}{kind}__{name}"


def kind_fields(kind: str) -> list[str]:
    """The form's inputs of one kind: its settings, then its credentials."""
    kind_class = KINDS[kind]
    return [config_field(kind, n) for n in kind_class.CONFIG_FIELDS] + [
        secret_field(kind, n) for n in kind_class.SECRET_FIELDS
    ]


def setting_words(name: str) -> str:
    """A kind's setting or credential as people read it ("start url")."""
    return str(SETTING_WORDS.get(name, name.replace("_", " ")))


class LinesField(forms.CharField):
    """A list of strings, one a line (patterns)."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 60})

    def prepare_value(self, value: Any) -> Any:
        return "\n".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value) or ""
        return [line.strip() for line in str(text).splitlines() if line.strip()]


class MappingField(forms.CharField):
    """{source field: knowledge-base field}, one `source field = knowledge-base field` a line."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 60})

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return "\n".join(f"{source} = {target}" for source, target in value.items())
        return value

    def to_python(self, value: Any) -> dict[str, str]:  # type: ignore[override]
        text = super().to_python(value) or ""
        mapping: dict[str, str] = {}
        for number, line in enumerate(str(text).splitlines(), start=1):
            if not line.strip():
                continue
            source, equals, target = line.partition("=")
            if not equals or not source.strip() or not target.strip():
                raise forms.ValidationError(
                    gettext("Line %(n)s: write “source field = knowledge-base field”.")
                    % {"n": number}
                )
            if source.strip() in mapping:
                raise forms.ValidationError(
                    gettext("Line %(n)s: %(field)s is mapped twice.")
                    % {"n": number, "field": source.strip()}
                )
            mapping[source.strip()] = target.strip()
        return mapping


def _shown(value: Any) -> str:
    return "" if value is None else str(value)


class SourceForm(forms.ModelForm):
    kb = forms.ModelChoiceField(
        queryset=KnowledgeBase.objects.none(), label=gettext_lazy("Knowledge base")
    )
    name = forms.CharField(max_length=200, label=gettext_lazy("Name"))
    slug = forms.SlugField(
        max_length=50,
        label=gettext_lazy("Slug"),
        help_text=gettext_lazy(
            "The first part of its documents' keys (slug/path). It cannot change once the "
            "source has documents."
        ),
    )
    kind = forms.ChoiceField(
        # the model's words for each kind (the registry's labels are the API's English)
        choices=[(name, Source.Kind(name).label) for name in KINDS],
        label=gettext_lazy("Kind"),
        help_text=gettext_lazy("Fixed once the source is saved."),
    )
    enabled = forms.BooleanField(
        required=False,
        initial=True,
        label=gettext_lazy("Enabled"),
        help_text=gettext_lazy("Unticked: paused, never synced."),
    )
    include = LinesField(
        required=False,
        label=gettext_lazy("Include"),
        help_text=gettext_lazy(
            "Gitignore-style patterns, one a line (docs/**/*.md, *.pdf): only paths that match "
            "one are taken. Empty: every path."
        ),
    )
    exclude = LinesField(
        required=False,
        label=gettext_lazy("Exclude"),
        help_text=gettext_lazy("Gitignore-style patterns, one a line: paths left out."),
    )
    access_groups = SimpleArrayField(
        forms.CharField(max_length=100), required=False, label=gettext_lazy("Access groups")
    )
    metadata_map = MappingField(required=False, label=gettext_lazy("Metadata map"))
    sync_every_minutes = forms.IntegerField(
        min_value=1,
        required=False,
        label=gettext_lazy("Sync every (minutes)"),
        help_text=gettext_lazy("Empty: only when someone asks for a sync."),
    )
    delete_threshold_percent = forms.IntegerField(
        min_value=1,
        max_value=100,
        initial=20,
        label=gettext_lazy("Deletion threshold (%)"),
        help_text=gettext_lazy(
            "A run that would delete more than this share of the source's documents waits for "
            "a person to confirm."
        ),
    )

    class Meta:
        model = Source
        fields: list[str] = []

    # set per request by SourceAdmin.get_form
    request: HttpRequest
    kb_queryset: QuerySet[KnowledgeBase]

    COMMON = (
        "name",
        "slug",
        "enabled",
        "include",
        "exclude",
        "access_groups",
        "metadata_map",
        "sync_every_minutes",
        "delete_threshold_percent",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.source: Source | None = self.instance if self.instance.pk else None
        self.saved: Source | None = None
        if self.source is not None:
            # fixed once saved: shown read-only by the admin (which leaves them out already)
            self.fields.pop("kb", None)
            self.fields.pop("kind", None)
            self.initial.update({name: getattr(self.source, name) for name in self.COMMON})
        else:
            self.fields["kb"].queryset = self.kb_queryset  # type: ignore[attr-defined]
        for kind in [self.source.kind] if self.source else list(KINDS):
            self._add_kind_fields(kind)
        self._explain()

    def _add_kind_fields(self, kind: str) -> None:
        kind_class = KINDS[kind]
        config = self.source.config if self.source else {}
        for name in kind_class.CONFIG_FIELDS:
            required = name in kind_class.REQUIRED_FIELDS
            self.fields[config_field(kind, name)] = forms.CharField(
                required=False,
                label=gettext("%(setting)s (required)") % {"setting": setting_words(name)}
                if required and not self.source
                else setting_words(name),
                max_length=2000,
                # wide: a folder's path, a site's or a repository's address is long
                widget=forms.TextInput(attrs={"class": "vLargeTextField"}),
                help_text=SETTING_HELP.get(name, kind_class.CONFIG_HELP.get(name, "")),
            )
            self.initial[config_field(kind, name)] = _shown(config.get(name))
        stored = self.source is not None and self.source.has_credentials
        for name in kind_class.SECRET_FIELDS:
            self.fields[secret_field(kind, name)] = forms.CharField(
                required=False,
                label=setting_words(name),
                max_length=4096,
                strip=False,
                # never rendered back, not even after a refused save
                widget=forms.PasswordInput(
                    render_value=False, attrs={"autocomplete": "new-password"}
                ),
                help_text=STORED_HINT if stored else NEW_HINT,
            )

    def _explain(self) -> None:
        """Which groups the user may assign, and which fields the knowledge base declares."""
        if self.request.user.is_superuser:
            held = gettext("any")
        else:
            reader = request_reader(self.request)
            held = (
                ", ".join(sorted(reader.access_groups)) if reader and reader.access_groups else ""
            )
            held = held or gettext("none")
        self.fields["access_groups"].help_text = gettext(
            "Comma-separated: the access groups of every document this source brings (empty: "
            "everyone in the tenant reads them). Groups you may assign: %(groups)s."
        ) % {"groups": held}
        help_text = gettext(
            "One “source field = knowledge-base field” a line: an S3 object tag, a front-matter "
            "key or an HTML meta name onto a metadata field the knowledge base declares."
        )
        if self.source is not None:
            names = sorted(
                n for n, spec in field_specs(self.source.kb).items() if not spec.built_in
            )
            help_text += " " + gettext("Fields %(kb)s declares: %(fields)s.") % {
                "kb": self.source.kb.name,
                "fields": ", ".join(names) or gettext("none yet"),
            }
        self.fields["metadata_map"].help_text = help_text

    def _post_clean(self) -> None:
        """Nothing: `source_save` is the model's one check and its only writer (`clean`)."""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        kind = self.source.kind if self.source else data["kind"]
        kb = self.source.kb if self.source else data["kb"]
        groups = data.get("access_groups") or []
        kept = self.source.access_groups if self.source else ()
        refused = groups_refused(self.request, groups, kept=kept)
        if refused:
            self.add_error("access_groups", refused)
            return data
        kind_class = KINDS[kind]
        config = {
            name: str(data.get(config_field(kind, name)) or "").strip()
            for name in kind_class.CONFIG_FIELDS
        }
        credentials = {
            name: data.get(secret_field(kind, name)) or "" for name in kind_class.SECRET_FIELDS
        }
        try:
            with transaction.atomic():
                self.saved = source_save(
                    kb=kb,
                    source=self.source,
                    name=data["name"],
                    slug=data["slug"],
                    kind=kind,
                    config={name: value for name, value in config.items() if value},
                    include=data.get("include") or [],
                    exclude=data.get("exclude") or [],
                    access_groups=groups,
                    metadata_map=data.get("metadata_map") or {},
                    sync_every_minutes=data.get("sync_every_minutes"),
                    enabled=bool(data.get("enabled")),
                    delete_threshold_percent=data["delete_threshold_percent"],
                    credentials=credentials if kind_class.SECRET_FIELDS else None,
                )
        except SourceInvalid as exc:
            self.add_error(self._field_of(exc, kind_class, data), error_words(exc))
        except SecretsUnavailable as exc:
            self.add_error(
                self._first(kind_fields(kind)[len(kind_class.CONFIG_FIELDS) :]), error_words(exc)
            )
        except IntegrityError:  # a concurrent save took the slug after the service's check
            self.add_error(
                "slug",
                gettext("%(kb)s already has a source %(slug)s.")
                % {"kb": kb, "slug": repr(data["slug"])},
            )
        return data

    def _field_of(
        self, exc: SourceInvalid, kind_class: type[Kind], data: dict[str, Any]
    ) -> str | None:
        """The input a refusal is about: the setting its message names (else the kind's first),
        the exclude patterns when the bad pattern is one of them."""
        kind, message = kind_class.name, str(exc)
        if exc.field == "config":
            named = [n for n in kind_class.CONFIG_FIELDS if f"'{n}'" in message]
            names = named or list(kind_class.REQUIRED_FIELDS) or list(kind_class.CONFIG_FIELDS)
            return self._first([config_field(kind, n) for n in names])
        if exc.field == "include":
            bad = [p for p in data.get("exclude") or [] if repr(p) in message]
            return "exclude" if bad else "include"
        if exc.field == "credentials":
            return self._first([secret_field(kind, n) for n in kind_class.SECRET_FIELDS])
        return self._first([exc.field])

    def _first(self, names: list[str]) -> str | None:
        return next((name for name in names if name in self.fields), None)
