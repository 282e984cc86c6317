"""Evaluation's API: a knowledge base's question sets (list, create, read, rename), their
questions (export, add or update, replace, import a JSONL or CSV file), and evaluation runs
(list, start, read, their results). Views check shapes with small serializers and call
`evaluation.services` and `evaluation.selectors`; they hold no logic of their own.

Every answer is scoped by the principal: a set or run of another tenant, or of a knowledge base
the key may not read, is a 404 exactly like one that does not exist. Found, it needs the
principal's permission, else a 403 naming it: an API key with `can_manage_sources` (the key of
a knowledge base's admins), or a session user with the evaluation permissions of their role
(content managers read, index admins write and run). Documents the principal may not read are
counts, never keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evaluation.api.serializers import (
    COUNT_ATTR,
    STATUS_ATTR,
    ComparisonOutput,
    EvaluationInput,
    EvaluationOutput,
    EvaluationPageInput,
    EvaluationPageOutput,
    ImportOutput,
    QuestionFileInput,
    QuestionListOutput,
    QuestionOutput,
    QuestionSetInput,
    QuestionSetListOutput,
    QuestionSetOutput,
    QuestionsInput,
    ResultPageInput,
    ResultPageOutput,
)
from evaluation.models import EvaluationRun, QuestionSet
from evaluation.question_files import MAX_FILE_BYTES, FileUnreadable, read_file, read_rows
from evaluation.selectors import (
    question_export,
    question_rows,
    question_sets_of_kb,
    run_comparison,
    run_results,
    run_status,
)
from evaluation.services.calibration import ADOPT_PERMISSION
from evaluation.services.question_sets import (
    QuestionSetInvalid,
    QuestionsRefused,
    question_set_create,
    question_set_update,
    questions_check,
    questions_import,
)
from evaluation.services.runs import evaluation_request
from kb.models import IndexVersion
from kb.services.base import ActionRefused
from retrieval.api import parsers
from retrieval.api.serializers import ErrorOutput
from retrieval.api.views import Refused, kb_or_404, principal_or_401
from retrieval.principals import Principal

MAX_ID = 2**63
VIEW, WRITE, RUN, ADOPT = "view", "write", "run", "adopt"
# A session user's permission for each kind of request (kb/roles.py gives them to the roles);
# adopting a calibration or rolling it back needs the admin's permission for it (index admins).
SESSION_PERMISSIONS = {
    VIEW: "evaluation.view_questionset",
    WRITE: "evaluation.change_questionset",
    RUN: "evaluation.run_evaluation",
    ADOPT: ADOPT_PERMISSION,
}
REFUSED = {
    VIEW: "This needs the permission to view evaluations: an API key with can_manage_sources, "
    "or a user with evaluation.view_questionset.",
    WRITE: "This needs the permission to change question sets: an API key with "
    "can_manage_sources, or a user with evaluation.change_questionset.",
    RUN: "This needs the permission to run evaluations: an API key with can_manage_sources, "
    "or a user with evaluation.run_evaluation.",
    ADOPT: "This needs the permission to adopt or roll back a calibration: an API key with "
    f"can_manage_sources, or a user with {ADOPT_PERMISSION}.",
}

Found = TypeVar("Found")


def _errors(*statuses: int, described: dict[int, str] | None = None) -> dict[int, OpenApiResponse]:
    """The error answers of an operation: these `statuses` besides 401, 403, 404 and 429, each
    described as below unless `described` says otherwise."""
    descriptions = {
        400: "Invalid input; `detail` names the field, or lists each question's problems.",
        401: "Missing, malformed, unknown, expired or revoked API key.",
        403: "Not allowed: the key cannot manage this knowledge base's evaluations.",
        404: "Not found (or not visible to this key: never told apart).",
        409: "Conflicts with the set's state (no questions, an index version no longer built).",
        413: "The file is larger than the limit.",
        415: "Unsupported media type.",
        429: "Rate limited; retry after `Retry-After` seconds.",
        **(described or {}),
    }
    return {
        code: OpenApiResponse(ErrorOutput, description=descriptions[code])
        for code in sorted({401, 403, 404, 429, *statuses})
    }


def _may(request: Request, principal: Principal, need: str) -> None:
    if principal.api_key_id is not None:
        allowed = principal.can_manage_sources
    else:
        allowed = request.user is not None and request.user.has_perm(SESSION_PERMISSIONS[need])
    if not allowed:
        raise Refused(403, "permission_denied", REFUSED[need])


def _allowed(
    request: Request, need: str, find: Callable[[Principal], Found]
) -> tuple[Principal, Found]:
    """Every view's first steps, in this order: the request's principal (401), what `find`
    finds for it (a 404 exactly like a missing one when the principal may not read it), then
    whether the principal may do `need` with it (403)."""
    principal = principal_or_401(request)
    found = find(principal)
    _may(request, principal, need)
    return principal, found


def _set_or_404(principal: Principal, question_set_id: int) -> QuestionSet:
    found = None
    if 0 < question_set_id < MAX_ID:
        found = (
            QuestionSet.objects.select_related("kb")
            .filter(pk=question_set_id, kb__tenant_id=principal.tenant_id)
            .first()
        )
    if found is None or not principal.may_read_kb(found.kb_id):
        raise NotFound(f"Question set {question_set_id} not found.")
    return found


def _run_or_404(principal: Principal, evaluation_id: int) -> EvaluationRun:
    found = None
    if 0 < evaluation_id < MAX_ID:
        found = (
            EvaluationRun.objects.select_related("kb", "index_version")
            .filter(pk=evaluation_id, kb__tenant_id=principal.tenant_id)
            .first()
        )
    if found is None or not principal.may_read_kb(found.kb_id):
        raise NotFound(f"Evaluation {evaluation_id} not found.")
    return found


def _actor(request: Request) -> Any:
    return request.user if request.user is not None and request.user.is_authenticated else None


def _refused_questions(exc: QuestionsRefused, field: str) -> ValidationError:
    return ValidationError({field: [str(problem) for problem in exc.checked.problems]})


def _set_output(question_set: QuestionSet) -> dict[str, Any]:
    return dict(QuestionSetOutput(question_set).data)


class QuestionSetListView(APIView):
    @extend_schema(
        operation_id="question_set_list",
        responses={200: QuestionSetListOutput, **_errors()},
        description="The knowledge base's question sets, each with its version and how many "
        "questions it holds.",
    )
    def get(self, request: Request, kb: str) -> Response:
        _, knowledge_base = _allowed(request, VIEW, lambda p: kb_or_404(p, kb))
        sets = list(question_sets_of_kb(knowledge_base.pk).select_related("kb"))
        return Response(QuestionSetListOutput({"results": sets}).data)

    @extend_schema(
        operation_id="question_set_create",
        request=QuestionSetInput,
        responses={201: QuestionSetOutput, **_errors(400, 415)},
        description="A new, empty question set of the knowledge base; its name is unique there.",
    )
    def post(self, request: Request, kb: str) -> Response:
        _, knowledge_base = _allowed(request, WRITE, lambda p: kb_or_404(p, kb))
        params = QuestionSetInput(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            created = question_set_create(
                kb=knowledge_base,
                name=params.validated_data["name"],
                description=params.validated_data.get("description", ""),
                actor=_actor(request),
            )
        except QuestionSetInvalid as exc:
            raise ValidationError({exc.field: [str(exc)]}) from exc
        setattr(created, COUNT_ATTR, 0)
        return Response(_set_output(created), status=status.HTTP_201_CREATED)


class QuestionSetDetailView(APIView):
    @extend_schema(
        operation_id="question_set_detail",
        responses={200: QuestionSetOutput, **_errors()},
        description="One question set: its name, description, version and size.",
    )
    def get(self, request: Request, question_set_id: int) -> Response:
        _, question_set = _allowed(request, VIEW, lambda p: _set_or_404(p, question_set_id))
        return Response(_set_output(question_set))

    @extend_schema(
        operation_id="question_set_update",
        request=QuestionSetInput,
        responses={200: QuestionSetOutput, **_errors(400, 415)},
        description="Rename or describe the set (only the fields given change; its version "
        "stays, its questions did not change).",
    )
    def patch(self, request: Request, question_set_id: int) -> Response:
        _, question_set = _allowed(request, WRITE, lambda p: _set_or_404(p, question_set_id))
        params = QuestionSetInput(data=request.data, partial=True)
        params.is_valid(raise_exception=True)
        given = params.validated_data
        try:
            saved = question_set_update(
                question_set=question_set,
                name=given.get("name", question_set.name),
                description=given.get("description", question_set.description),
                actor=_actor(request),
            )
        except QuestionSetInvalid as exc:
            raise ValidationError({exc.field: [str(exc)]}) from exc
        return Response(_set_output(saved))


def _imported(outcome: Any, problems: list[str]) -> dict[str, Any]:
    return dict(
        ImportOutput(
            {
                "added": outcome.added,
                "updated": outcome.updated,
                "unchanged": outcome.unchanged,
                "removed": outcome.removed,
                "skipped": outcome.skipped,
                "version": outcome.version,
                "problems": problems,
            }
        ).data
    )


class QuestionSetQuestionsView(APIView):
    @extend_schema(
        operation_id="question_set_questions",
        responses={200: QuestionListOutput, **_errors()},
        description="Every question of the set, in the fields an import reads (export). "
        "Expected documents this key may not read are counted in `hidden_documents`, never "
        "named.",
    )
    def get(self, request: Request, question_set_id: int) -> Response:
        principal, question_set = _allowed(request, VIEW, lambda p: _set_or_404(p, question_set_id))
        rows = question_rows(
            questions=list(question_set.questions.order_by("pk")),
            kb_id=question_set.kb_id,
            reader=principal,
        )
        body = {
            "question_set": question_set.pk,
            "version": question_set.version,
            "results": [QuestionOutput(question_export(row)).data for row in rows],
        }
        return Response(body)

    def _write(self, request: Request, question_set_id: int, *, replace: bool) -> Response:
        principal, question_set = _allowed(
            request, WRITE, lambda p: _set_or_404(p, question_set_id)
        )
        params = QuestionsInput(data=request.data)
        params.is_valid(raise_exception=True)
        raw = read_rows([dict(q) for q in params.validated_data["questions"]])
        checked = questions_check(question_set=question_set, raw=raw, reader=principal)
        try:
            outcome = questions_import(
                question_set=question_set,
                checked=checked,
                reader=principal,
                replace=replace,
                valid_only=params.validated_data["valid_only"],
                actor=_actor(request),
            )
        except QuestionsRefused as exc:
            raise _refused_questions(exc, "questions") from exc
        return Response(_imported(outcome, [str(p) for p in checked.problems]))

    @extend_schema(
        operation_id="question_set_questions_add",
        request=QuestionsInput,
        responses={200: ImportOutput, **_errors(400, 415)},
        description="Add questions, or update the ones with their ids. Each question is checked "
        "(its expected documents are documents of the knowledge base this key may read, no id "
        "or question twice, en or zh): any problem refuses all of them with a 400 listing each, "
        "unless `valid_only`. The set's version rises when anything changed.",
    )
    def post(self, request: Request, question_set_id: int) -> Response:
        return self._write(request, question_set_id, replace=False)

    @extend_schema(
        operation_id="question_set_questions_replace",
        request=QuestionsInput,
        responses={200: ImportOutput, **_errors(400, 415)},
        description="Replace the set's questions by these (checked as for POST; the others are "
        "removed). Expected documents this key may not read stay on the questions that had "
        "them.",
    )
    def put(self, request: Request, question_set_id: int) -> Response:
        return self._write(request, question_set_id, replace=True)


class QuestionSetImportView(APIView):
    parser_classes = [parsers.MultiPartParser]

    @extend_schema(
        operation_id="question_set_import",
        request={"multipart/form-data": QuestionFileInput},
        responses={200: ImportOutput, **_errors(400, 413, 415)},
        description="Import a JSONL or CSV file of questions into the set (added, or updating "
        "those with their ids; `replace`: the set becomes the file). Every row is checked: "
        "unknown document keys, duplicate ids and questions, empty questions, languages other "
        "than en and zh. Any problem refuses the file with a 400 listing each by line, unless "
        "`valid_only`.",
    )
    def post(self, request: Request, question_set_id: int) -> Response:
        principal, question_set = _allowed(
            request, WRITE, lambda p: _set_or_404(p, question_set_id)
        )
        params = QuestionFileInput(data=request.data)
        params.is_valid(raise_exception=True)
        upload = params.validated_data["file"]
        if upload.size and upload.size > MAX_FILE_BYTES:
            raise Refused(413, "file_too_large", "The file is larger than 2 MB; split it.")
        try:
            raw = read_file(upload.read(MAX_FILE_BYTES + 1), upload.name or "")
        except FileUnreadable as exc:
            raise ValidationError({"file": [str(exc)]}) from exc
        checked = questions_check(question_set=question_set, raw=raw, reader=principal)
        try:
            outcome = questions_import(
                question_set=question_set,
                checked=checked,
                reader=principal,
                replace=params.validated_data["replace"],
                valid_only=params.validated_data["valid_only"],
                actor=_actor(request),
            )
        except QuestionsRefused as exc:
            raise _refused_questions(exc, "file") from exc
        return Response(_imported(outcome, [str(p) for p in checked.problems]))


def _run_output(run: EvaluationRun) -> dict[str, Any]:
    setattr(run, STATUS_ATTR, run_status(run))
    return dict(EvaluationOutput(run).data)


class EvaluationListView(APIView):
    @extend_schema(
        operation_id="evaluation_list",
        parameters=[EvaluationPageInput],
        responses={200: EvaluationPageOutput, **_errors(400)},
        description="The knowledge base's evaluation runs, newest first, one page at a time "
        "(pass `next_cursor` back as `cursor`).",
    )
    def get(self, request: Request, kb: str) -> Response:
        _, knowledge_base = _allowed(request, VIEW, lambda p: kb_or_404(p, kb))
        params = EvaluationPageInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        limit: int = params.validated_data["limit"]
        runs = (
            EvaluationRun.objects.filter(kb=knowledge_base)
            .select_related("kb", "index_version")
            .order_by("-pk")
        )
        before = params.validated_data.get("cursor")
        if before is not None:
            runs = runs.filter(pk__lt=before)
        page = list(runs[: limit + 1])
        next_before = page[limit - 1].pk if len(page) > limit else None
        for run in page[:limit]:
            setattr(run, STATUS_ATTR, run_status(run))
        return Response(EvaluationPageOutput((page[:limit], next_before)).data)

    @extend_schema(
        operation_id="evaluation_start",
        request=EvaluationInput,
        responses={
            202: OpenApiResponse(EvaluationOutput, description="A new run was started."),
            200: OpenApiResponse(
                EvaluationOutput, description="The same run was open already: that run."
            ),
            **_errors(400, 409, 415),
        },
        description="Ask every question of a set of this knowledge base, in each mode, of its "
        "active version (pinned when the run starts) or of another index version (a "
        "candidate). The run reads what this key may read. Idempotent: while the same run (set, "
        "version, modes) is open, asking again returns it (200).",
    )
    def post(self, request: Request, kb: str) -> Response:
        principal, knowledge_base = _allowed(request, RUN, lambda p: kb_or_404(p, kb))
        params = EvaluationInput(data=request.data)
        params.is_valid(raise_exception=True)
        values = params.validated_data
        question_set = QuestionSet.objects.filter(
            pk=values["question_set"], kb=knowledge_base
        ).first()
        if question_set is None:
            raise ValidationError(
                {
                    "question_set": [
                        f"{knowledge_base.slug} has no question set {values['question_set']}."
                    ]
                }
            )
        version = None
        if values.get("index_version") is not None:
            version = IndexVersion.objects.filter(
                kb=knowledge_base, number=values["index_version"]
            ).first()
            if version is None:
                raise ValidationError(
                    {
                        "index_version": [
                            f"{knowledge_base.slug} has no index version {values['index_version']}."
                        ]
                    }
                )
        try:
            run, created = evaluation_request(
                kb=knowledge_base,
                question_set=question_set,
                modes=values["modes"],
                reader=principal,
                index_version=version,
                actor=_actor(request),
            )
        except ActionRefused as exc:
            raise Refused(409, "conflict", str(exc)) from exc
        return Response(
            _run_output(run), status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK
        )


class EvaluationDetailView(APIView):
    @extend_schema(
        operation_id="evaluation_detail",
        responses={200: EvaluationOutput, **_errors()},
        description="One run: its progress, its figures per mode (over all questions, per "
        "language and per tag; latency), and the settings it ran with.",
    )
    def get(self, request: Request, evaluation_id: int) -> Response:
        _, run = _allowed(request, VIEW, lambda p: _run_or_404(p, evaluation_id))
        return Response(_run_output(run))


class EvaluationResultsView(APIView):
    @extend_schema(
        operation_id="evaluation_results",
        parameters=[ResultPageInput],
        responses={200: ResultPageOutput, **_errors(400)},
        description="The run's answers, question by question and mode by mode, one page at a "
        "time: the rank of the first expected document (null: missed) and the documents that "
        "came back. Documents this key may not read are counted, never named.",
    )
    def get(self, request: Request, evaluation_id: int) -> Response:
        principal, run = _allowed(request, VIEW, lambda p: _run_or_404(p, evaluation_id))
        params = ResultPageInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        rows, after = run_results(
            run=run,
            reader=principal,
            after=params.validated_data.get("cursor"),
            limit=params.validated_data["limit"],
        )
        return Response(ResultPageOutput((rows, after)).data)


class EvaluationCompareView(APIView):
    @extend_schema(
        operation_id="evaluation_compare",
        responses={200: ComparisonOutput, **_errors(400)},
        description="Run `evaluation_id` (before) beside run `other_id` (after), both of one "
        "knowledge base: each figure of each mode both asked, with its change, and every "
        "question whose rank changed (lost, gained, down, up; asked by one run only), as the "
        "admin's Compare page and the swap's confirmation show them. `notes` say what makes "
        "the runs less comparable. Questions are named by their texts and ranks only.",
    )
    def get(self, request: Request, evaluation_id: int, other_id: int) -> Response:
        _, (before, after) = _allowed(
            request,
            VIEW,
            lambda p: (_run_or_404(p, evaluation_id), _run_or_404(p, other_id)),
        )
        if before.kb_id != after.kb_id:
            raise ValidationError(
                {
                    "other_id": [
                        f"Evaluation {other_id} is of another knowledge base: only runs "
                        "of one knowledge base compare."
                    ]
                }
            )
        return Response(ComparisonOutput(run_comparison(before, after)).data)
