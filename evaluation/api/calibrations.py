"""Evaluation's API for a knowledge base's fusion calibrations (issue 39, item 6): list them, ask
for one (computed in the background as leased work), read one (its state, held-out MRR@10 of
the default and of the candidate, its folds, each question whose held-out rank changed, the
quality gate's verdict on adopting it), adopt one through the gate, roll back to the default.

As the rest of evaluation's API (`evaluation.api.views`): views check shapes with small
serializers, read `evaluation.calibration` and write through `evaluation.services.calibration`;
a calibration of another tenant, or of a knowledge base the key may not read, is a 404 exactly
like one that does not exist; found, it needs the principal's permission (403): an API key with
`can_manage_sources`, or a session user with the permission the admin asks for the same page
(reading: evaluation.view_questionset; asking: evaluation.run_evaluation; adopting and rolling
back: ADOPT_PERMISSION). Overriding the quality gate needs a person: a session user with
evaluation.override_quality_gate, never an API key, as a swap's override does. A refusal of the
service answers with its code (`CalibrationRefused.code`) and its words."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evaluation.api.serializers import (
    STATUS_ATTR,
    CalibrationAdoptInput,
    CalibrationDetailOutput,
    CalibrationInput,
    CalibrationOutput,
    CalibrationPageInput,
    CalibrationPageOutput,
    CalibrationReport,
    CalibrationRollBackInput,
    CalibrationRollBackOutput,
)
from evaluation.api.views import ADOPT, MAX_ID, RUN, VIEW, _actor, _allowed, _errors
from evaluation.calibration import (
    MIN_QUESTIONS,
    calibration_changes,
    calibration_page,
    calibration_status,
    calibration_verdict,
)
from evaluation.models import Calibration, QuestionSet
from evaluation.services.calibration import (
    CALIBRATION_STALE,
    PERMISSION_DENIED,
    QUALITY_GATE_REFUSED,
    REASON_REQUIRED,
    CalibrationRefused,
    calibration_adopt,
    calibration_request,
    calibration_roll_back,
)
from retrieval.api.views import Refused, kb_or_404
from retrieval.principals import Principal

# The status of each refusal's code; any other is a conflict with the state (409).
REFUSAL_STATUS = {PERMISSION_DENIED: 403, REASON_REQUIRED: 400}
KEY_MAY_NOT_OVERRIDE = (
    "Only a person may override the quality gate: an admin session of a user with "
    "evaluation.override_quality_gate (an index admin), giving a reason. An API key may adopt "
    "a calibration the gate lets through."
)
CONFLICTS = (
    "Refused by the calibration's or the knowledge base's state, `error` saying which: "
    "quality_gate_refused, calibration_stale, too_few_questions, no_active_version, conflict."
)


def _refused(exc: CalibrationRefused) -> Refused:
    return Refused(REFUSAL_STATUS.get(exc.code, 409), exc.code, str(exc))


def _calibration_or_404(principal: Principal, calibration_id: int) -> Calibration:
    found = None
    if 0 < calibration_id < MAX_ID:
        found = (
            Calibration.objects.select_related("kb", "index_version", "question_set", "task")
            .filter(pk=calibration_id, kb__tenant_id=principal.tenant_id)
            .first()
        )
    if found is None or not principal.may_read_kb(found.kb_id):
        raise NotFound(f"Calibration {calibration_id} not found.")
    return found


def _with_status(calibration: Calibration) -> Calibration:
    setattr(calibration, STATUS_ATTR, calibration_status(calibration))
    return calibration


def _output(calibration: Calibration) -> dict[str, Any]:
    return dict(CalibrationOutput(_with_status(calibration)).data)


def _report(principal: Principal, calibration: Calibration) -> dict[str, Any]:
    """The calibration as its admin page reads it: its changes as `principal` may see them,
    the gate's verdict when it may be adopted."""
    _with_status(calibration)
    adoptable = calibration.state in Calibration.ADOPTABLE
    report = CalibrationReport(
        calibration=calibration,
        changes=calibration_changes(calibration, reader=principal),
        verdict=calibration_verdict(calibration) if adoptable else None,
    )
    return dict(CalibrationDetailOutput(report).data)


class CalibrationListView(APIView):
    @extend_schema(
        operation_id="calibration_list",
        parameters=[CalibrationPageInput],
        responses={200: CalibrationPageOutput, **_errors(400)},
        description="The knowledge base's fusion calibrations, newest first, one page at a time "
        "(pass `next_cursor` back as `cursor`): each one's state and held-out MRR@10 of the "
        "default and of the calibration.",
    )
    def get(self, request: Request, kb: str) -> Response:
        _, knowledge_base = _allowed(request, VIEW, lambda p: kb_or_404(p, kb))
        params = CalibrationPageInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        page, next_before = calibration_page(
            knowledge_base.pk,
            before=params.validated_data.get("cursor"),
            limit=params.validated_data["limit"],
        )
        for calibration in page:
            _with_status(calibration)
        return Response(CalibrationPageOutput((page, next_before)).data)

    @extend_schema(
        operation_id="calibration_request",
        request=CalibrationInput,
        responses={
            202: OpenApiResponse(
                CalibrationOutput, description="A new calibration is being computed."
            ),
            200: OpenApiResponse(
                CalibrationOutput,
                description="This set version was calibrated (or is being) on the active "
                "index version already: that calibration.",
            ),
            **_errors(400, 409, 415, described={409: CONFLICTS}),
        },
        description="Refit hybrid search's fusion on a question set of the knowledge base (at "
        f"least {MIN_QUESTIONS} questions), cross-validated against the shipped default; "
        "computed in the background (follow `GET /calibrations/{id}`). Idempotent: asking "
        "again for the same set version and active index version returns the calibration "
        "asked before (200), unless it failed.",
    )
    def post(self, request: Request, kb: str) -> Response:
        principal, knowledge_base = _allowed(request, RUN, lambda p: kb_or_404(p, kb))
        params = CalibrationInput(data=request.data)
        params.is_valid(raise_exception=True)
        set_id = params.validated_data["question_set"]
        question_set = QuestionSet.objects.filter(pk=set_id, kb=knowledge_base).first()
        if question_set is None:
            raise ValidationError(
                {"question_set": [f"{knowledge_base.slug} has no question set {set_id}."]}
            )
        try:
            calibration, created = calibration_request(
                kb=knowledge_base, question_set=question_set, actor=_actor(request)
            )
        except CalibrationRefused as exc:
            raise _refused(exc) from exc
        calibration = _calibration_or_404(principal, calibration.pk)
        return Response(
            _output(calibration),
            status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK,
        )


class CalibrationDetailView(APIView):
    @extend_schema(
        operation_id="calibration_detail",
        responses={200: CalibrationDetailOutput, **_errors()},
        description="One calibration: its state; held-out MRR@10 of the default and of the "
        "calibration, overall and per fold; every question whose held-out rank changed "
        "(documents this key may not read counted, never named); and, when it may be "
        "adopted, the quality gate's verdict, as the admin's calibration page shows them.",
    )
    def get(self, request: Request, calibration_id: int) -> Response:
        principal, calibration = _allowed(
            request, VIEW, lambda p: _calibration_or_404(p, calibration_id)
        )
        return Response(_report(principal, calibration))


class CalibrationAdoptView(APIView):
    @extend_schema(
        operation_id="calibration_adopt",
        request=CalibrationAdoptInput,
        responses={
            200: OpenApiResponse(
                CalibrationDetailOutput,
                description="Adopted: hybrid search in its knowledge base fuses by it.",
            ),
            **_errors(
                400,
                409,
                415,
                described={
                    400: "Invalid input, or an override without a reason (reason_required).",
                    403: "Not allowed: the key or user may not adopt calibrations, or may not "
                    "override the quality gate (an API key never may).",
                    409: CONFLICTS,
                },
            ),
        },
        description="Make hybrid search in the calibration's knowledge base fuse by it, "
        "judged by the quality gate a swap passes: refused (409 quality_gate_refused) when its "
        "held-out MRR@10 drops below the default's by more than the gate allows, or "
        "(calibration_stale) when its set, the active index version or the shipped default "
        "changed since, unless `override` with a `reason` by a person who may override the "
        "gate. Audited on the knowledge base's timeline. Refused (409 conflict) for a "
        "calibration computing, failed, adopted already or that kept the default.",
    )
    def post(self, request: Request, calibration_id: int) -> Response:
        principal, calibration = _allowed(
            request, ADOPT, lambda p: _calibration_or_404(p, calibration_id)
        )
        params = CalibrationAdoptInput(data=request.data)
        params.is_valid(raise_exception=True)
        override = params.validated_data["override"]
        actor = _actor(request)
        # the service lets a caller without an actor (a script) override: not so a key here
        person = actor is not None and principal.api_key_id is None
        try:
            calibration_adopt(
                calibration=calibration,
                actor=actor,
                reason=params.validated_data["reason"],
                override=override and person,
            )
        except CalibrationRefused as exc:
            gate = exc.code in (QUALITY_GATE_REFUSED, CALIBRATION_STALE)
            if gate and override and not person:
                raise Refused(403, PERMISSION_DENIED, KEY_MAY_NOT_OVERRIDE) from exc
            raise _refused(exc) from exc
        adopted = _calibration_or_404(principal, calibration.pk)
        return Response(_report(principal, adopted))


class CalibrationRollBackView(APIView):
    @extend_schema(
        operation_id="calibration_roll_back",
        request=CalibrationRollBackInput,
        responses={
            200: CalibrationRollBackOutput,
            **_errors(
                400,
                409,
                415,
                described={409: "Search in this knowledge base uses the default already."},
            ),
        },
        description="Make hybrid search in the knowledge base fuse by the shipped default "
        "again: the adopted calibration is rolled back (it may be adopted again). Never gated; "
        "audited on the knowledge base's timeline.",
    )
    def post(self, request: Request, kb: str) -> Response:
        _, knowledge_base = _allowed(request, ADOPT, lambda p: kb_or_404(p, kb))
        params = CalibrationRollBackInput(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            rolled_back = calibration_roll_back(
                kb=knowledge_base, actor=_actor(request), reason=params.validated_data["reason"]
            )
        except CalibrationRefused as exc:
            raise _refused(exc) from exc
        body = {"kb": knowledge_base.slug, "rolled_back": [c.pk for c in rolled_back]}
        return Response(CalibrationRollBackOutput(body).data)
