"""The sources' API: a knowledge base's sources (list, create), one source (read, change), a
sync (start one, or find the one open), its runs (list, read) and a person's answer to the
deletions a run holds (confirm, keep). Views validate with small serializers and call
`sources.services`; they hold no logic of their own.

Every answer is scoped by the principal: a source of another tenant, or of a knowledge base the
key may not read, is a 404 exactly like one that does not exist. Found, it needs the principal's
`can_manage_sources` (an API key's flag; a session user's `sources.change_source`), else a 403
naming it. Credentials are write-only: `has_credentials` says whether some are stored."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.db import IntegrityError
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from kb.access import access_groups_clearing_refused, access_groups_not_held, may_read_groups
from kb.models import KnowledgeBase
from kb.services.base import ActionRefused
from retrieval.api.serializers import ErrorOutput
from retrieval.api.views import Refused, kb_or_404, principal_or_401
from retrieval.principals import Principal
from sources.api.serializers import (
    LAST_RUN_ATTR,
    RunAnswerOutput,
    RunDetailOutput,
    RunOutput,
    RunPageInput,
    RunPageOutput,
    SourceInput,
    SourceListOutput,
    SourceOutput,
)
from sources.models import Source, SyncRun
from sources.secrets import SecretsUnavailable
from sources.selectors import sources_of_kb
from sources.services.runs import sync_deletions_confirm, sync_deletions_keep, sync_request
from sources.services.sources import SourceInvalid, source_save

MANAGE_REFUSED = (
    "This needs the permission to manage sources: an API key with can_manage_sources, or a "
    "user with sources.change_source."
)
MAX_ID = 2**63


def _errors(*statuses: int) -> dict[int, OpenApiResponse]:
    descriptions = {
        400: "Invalid input; `detail` names the field and says what is wrong.",
        401: "Missing, malformed, unknown, expired or revoked API key.",
        403: "Not allowed: the key cannot manage sources, or may not assign these groups.",
        404: "Not found (or not visible to this key: never told apart).",
        409: "Conflicts with the source's or run's state (paused, no deletions held).",
        415: "Unsupported media type: send JSON.",
        429: "Rate limited; retry after `Retry-After` seconds.",
        503: "Credentials cannot be stored: no encryption key is configured on the server.",
    }
    return {
        code: OpenApiResponse(ErrorOutput, description=descriptions[code])
        for code in sorted({401, 403, 404, 429, *statuses})
    }


def _source_or_404(principal: Principal, source_id: int) -> Source:
    source = None
    if 0 < source_id < MAX_ID:
        source = (
            Source.objects.select_related("kb")
            .filter(pk=source_id, kb__tenant_id=principal.tenant_id)
            .first()
        )
    if source is None or not principal.may_read_kb(source.kb_id):
        raise NotFound(f"Source {source_id} not found.")
    return source


def _run_or_404(source: Source, run_id: int) -> SyncRun:
    run = (
        SyncRun.objects.select_related("source").filter(pk=run_id, source=source).first()
        if 0 < run_id < MAX_ID
        else None
    )
    if run is None:
        raise NotFound(f"Run {run_id} of source {source.pk} not found.")
    return run


def _may_manage(principal: Principal) -> None:
    if not principal.can_manage_sources:
        raise Refused(403, "permission_denied", MANAGE_REFUSED)


def _groups_refused(principal: Principal, groups: Sequence[str], kept: Sequence[str]) -> None:
    """A source puts its documents behind `groups`: only groups the caller holds (besides those
    it has already), never so that the caller could not read them back, and a restricted source
    made open only by a holder of all its groups; the uploads' rule."""
    held, every = principal.access_groups, principal.all_groups
    foreign = access_groups_not_held(
        groups=set(groups) - set(kept), access_groups=held, all_groups=every
    )
    if foreign:
        raise Refused(
            403,
            "permission_denied",
            f"You may only assign access groups you hold; not: {', '.join(foreign)}.",
        )
    if not may_read_groups(groups=groups, access_groups=held, all_groups=every):
        raise Refused(
            403,
            "permission_denied",
            "Keep a group you hold, or none: you could not read the documents otherwise.",
        )
    refused = access_groups_clearing_refused(
        before=kept, after=groups, access_groups=held, all_groups=every
    )
    if refused:
        raise Refused(403, "permission_denied", refused)


def _save(kb: KnowledgeBase, source: Source | None, values: Mapping[str, Any]) -> Source:
    """`source_save` with its refusals as the API's: a field's 400, or 503 without a key."""
    try:
        return source_save(kb=kb, source=source, **values)
    except SourceInvalid as exc:
        raise ValidationError({exc.field: [str(exc)]}) from exc
    except SecretsUnavailable as exc:
        raise Refused(503, "unavailable", str(exc)) from exc
    except IntegrityError as exc:  # a concurrent create took the slug after the check
        raise ValidationError({"slug": [f"{kb} already has a source {values['slug']!r}."]}) from exc


def _actor(request: Request) -> Any:
    return request.user if request.user is not None and request.user.is_authenticated else None


class KnowledgeBaseSourcesView(APIView):
    @extend_schema(
        operation_id="source_list",
        responses={200: SourceListOutput, **_errors()},
        description="The knowledge base's sources, each with its latest run. Needs a key that "
        "may manage sources.",
    )
    def get(self, request: Request, kb: str) -> Response:
        principal = principal_or_401(request)
        knowledge_base = kb_or_404(principal, kb)
        _may_manage(principal)
        sources = list(sources_of_kb(knowledge_base.pk).select_related("kb"))
        latest = [getattr(s, "last_run_id", None) for s in sources]
        runs = SyncRun.objects.in_bulk([run_id for run_id in latest if run_id])
        for source, run_id in zip(sources, latest, strict=True):
            setattr(source, LAST_RUN_ATTR, runs.get(run_id) if run_id else None)
        return Response(SourceListOutput({"results": sources}).data)

    @extend_schema(
        operation_id="source_create",
        request=SourceInput,
        responses={201: SourceOutput, **_errors(400, 415, 503)},
        description="Add a source to the knowledge base. Its settings are checked by its kind "
        "(a path that is not a folder, a bucket missing, an address it may not reach): a 400 "
        "names the field. Credentials are stored encrypted and never returned.",
    )
    def post(self, request: Request, kb: str) -> Response:
        principal = principal_or_401(request)
        knowledge_base = kb_or_404(principal, kb)
        _may_manage(principal)
        params = SourceInput(data=request.data)
        params.is_valid(raise_exception=True)
        values = dict(params.validated_data)
        values["config"] = _merged_config({}, values["config"])  # a null setting is one not given
        _groups_refused(principal, values.get("access_groups", []), kept=[])
        source = _save(knowledge_base, None, values)
        setattr(source, LAST_RUN_ATTR, None)
        return Response(SourceOutput(source).data, status=status.HTTP_201_CREATED)


def _merged_config(stored: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """JSON merge patch of the settings: given keys replace stored ones, a null removes one."""
    merged = {**stored, **given}
    return {key: value for key, value in merged.items() if value is not None}


class SourceDetailView(APIView):
    @extend_schema(
        operation_id="source_detail",
        responses={200: SourceOutput, **_errors()},
        description="One source, with its latest run. Credentials are never returned.",
    )
    def get(self, request: Request, source_id: int) -> Response:
        principal = principal_or_401(request)
        source = _source_or_404(principal, source_id)
        _may_manage(principal)
        return Response(SourceOutput(source).data)

    @extend_schema(
        operation_id="source_update",
        request=SourceInput,
        responses={200: SourceOutput, **_errors(400, 415, 503)},
        description="Change a source: only the fields given change. `config` is merged into the "
        "stored settings (a key set to null removes it); `credentials` given replace the stored "
        "ones key by key (an empty string keeps one). The kind cannot change, nor the slug once "
        "the source has documents.",
    )
    def patch(self, request: Request, source_id: int) -> Response:
        principal = principal_or_401(request)
        source = _source_or_404(principal, source_id)
        _may_manage(principal)
        params = SourceInput(data=request.data, partial=True)
        params.is_valid(raise_exception=True)
        given = dict(params.validated_data)
        if given.get("kind", source.kind) != source.kind:  # before its settings are checked
            raise ValidationError({"kind": ["A source's kind cannot change; add a new source."]})
        values: dict[str, Any] = {
            "name": source.name,
            "slug": source.slug,
            "kind": source.kind,
            "include": source.include,
            "exclude": source.exclude,
            "access_groups": source.access_groups,
            "metadata_map": source.metadata_map,
            "sync_every_minutes": source.sync_every_minutes,
            "enabled": source.enabled,
            "delete_threshold_percent": source.delete_threshold_percent,
            "credentials": None,
            **given,
            "config": _merged_config(source.config, given.get("config", {})),
        }
        if "access_groups" in given:
            _groups_refused(principal, given["access_groups"], kept=source.access_groups)
        saved = _save(source.kb, source, values)
        return Response(SourceOutput(saved).data)


class SourceSyncView(APIView):
    @extend_schema(
        operation_id="source_sync",
        request=None,
        responses={
            202: OpenApiResponse(RunOutput, description="A new run was started."),
            200: OpenApiResponse(RunOutput, description="A run was already open: that run."),
            **_errors(409),
        },
        description="Sync the source now. Idempotent: while a run is open, asking again returns "
        "that run (200) instead of starting a second. A paused source is a 409.",
    )
    def post(self, request: Request, source_id: int) -> Response:
        principal = principal_or_401(request)
        source = _source_or_404(principal, source_id)
        _may_manage(principal)
        try:
            run, created = sync_request(
                source=source, trigger=SyncRun.Trigger.API, actor=_actor(request)
            )
        except ActionRefused as exc:
            raise Refused(409, "conflict", str(exc)) from exc
        return Response(
            RunOutput(run).data, status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK
        )


class SourceRunListView(APIView):
    @extend_schema(
        operation_id="source_run_list",
        parameters=[RunPageInput],
        responses={200: RunPageOutput, **_errors(400)},
        description="The source's runs, newest first, one page at a time (pass `next_cursor` "
        "back as `cursor`).",
    )
    def get(self, request: Request, source_id: int) -> Response:
        principal = principal_or_401(request)
        source = _source_or_404(principal, source_id)
        _may_manage(principal)
        params = RunPageInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        limit: int = params.validated_data["limit"]
        runs = SyncRun.objects.filter(source=source).order_by("-pk")
        before = params.validated_data.get("cursor")
        if before is not None:
            runs = runs.filter(pk__lt=before)
        page = list(runs[: limit + 1])
        next_before = page[limit - 1].pk if len(page) > limit else None
        return Response(RunPageOutput((page[:limit], next_before)).data)


class SourceRunDetailView(APIView):
    @extend_schema(
        operation_id="source_run_detail",
        responses={200: RunDetailOutput, **_errors()},
        description="One run: its progress and counts, why it deleted nothing or what it holds "
        "for confirmation, and its per-item problems.",
    )
    def get(self, request: Request, source_id: int, run_id: int) -> Response:
        principal = principal_or_401(request)
        run = _run_or_404(_source_or_404(principal, source_id), run_id)
        _may_manage(principal)
        return Response(RunDetailOutput(run).data)


def _answer(request: Request, source_id: int, run_id: int, answer: Callable[..., int]) -> Response:
    """A person's answer to the deletions a run holds (`sync_deletions_confirm` or `_keep`):
    the run after it and how many documents it touched; 409 when the run holds none."""
    principal = principal_or_401(request)
    run = _run_or_404(_source_or_404(principal, source_id), run_id)
    _may_manage(principal)
    try:
        documents = answer(run_id=run.pk, actor=_actor(request))
    except ActionRefused as exc:
        raise Refused(409, "conflict", str(exc)) from exc
    run.refresh_from_db()
    return Response(RunAnswerOutput((run, documents)).data)


class SourceRunConfirmView(APIView):
    @extend_schema(
        operation_id="source_run_confirm",
        request=None,
        responses={200: RunAnswerOutput, **_errors(409)},
        description="Delete the documents the run holds for confirmation (restorable for the "
        "knowledge base's retention window) and close the run; `documents` says how many. A "
        "run that holds no deletions (not awaiting confirmation, or answered already) is a 409.",
    )
    def post(self, request: Request, source_id: int, run_id: int) -> Response:
        return _answer(request, source_id, run_id, sync_deletions_confirm)


class SourceRunKeepView(APIView):
    @extend_schema(
        operation_id="source_run_keep",
        request=None,
        responses={200: RunAnswerOutput, **_errors(409)},
        description="Keep the documents the run would have deleted and close the run; "
        "`documents` says how many. The next run that still misses them holds them again. A "
        "run that holds no deletions is a 409.",
    )
    def post(self, request: Request, source_id: int, run_id: int) -> Response:
        return _answer(request, source_id, run_id, sync_deletions_keep)
