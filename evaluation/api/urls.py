"""Evaluation's API paths, mounted under /api/v1/ (config/urls.py). Exact paths: no redirect
that adds a slash (a redirected POST loses its body)."""

from django.urls import path
from django.views.decorators.common import no_append_slash

from evaluation.api.calibrations import (
    CalibrationAdoptView,
    CalibrationDetailView,
    CalibrationListView,
    CalibrationRollBackView,
)
from evaluation.api.views import (
    EvaluationCompareView,
    EvaluationDetailView,
    EvaluationListView,
    EvaluationResultsView,
    QuestionSetDetailView,
    QuestionSetImportView,
    QuestionSetListView,
    QuestionSetQuestionsView,
)

urlpatterns = [
    path(
        "kbs/<str:kb>/question-sets",
        no_append_slash(QuestionSetListView.as_view()),
        name="question-set-list",
    ),
    path(
        "question-sets/<int:question_set_id>",
        no_append_slash(QuestionSetDetailView.as_view()),
        name="question-set-detail",
    ),
    path(
        "question-sets/<int:question_set_id>/questions",
        no_append_slash(QuestionSetQuestionsView.as_view()),
        name="question-set-questions",
    ),
    path(
        "question-sets/<int:question_set_id>/import",
        no_append_slash(QuestionSetImportView.as_view()),
        name="question-set-import",
    ),
    path(
        "kbs/<str:kb>/evaluations",
        no_append_slash(EvaluationListView.as_view()),
        name="evaluation-list",
    ),
    path(
        "evaluations/<int:evaluation_id>",
        no_append_slash(EvaluationDetailView.as_view()),
        name="evaluation-detail",
    ),
    path(
        "evaluations/<int:evaluation_id>/results",
        no_append_slash(EvaluationResultsView.as_view()),
        name="evaluation-results",
    ),
    path(
        "evaluations/<int:evaluation_id>/compare/<int:other_id>",
        no_append_slash(EvaluationCompareView.as_view()),
        name="evaluation-compare",
    ),
    path(
        "kbs/<str:kb>/calibrations",
        no_append_slash(CalibrationListView.as_view()),
        name="calibration-list",
    ),
    path(
        "kbs/<str:kb>/calibrations/roll-back",
        no_append_slash(CalibrationRollBackView.as_view()),
        name="calibration-roll-back",
    ),
    path(
        "calibrations/<int:calibration_id>",
        no_append_slash(CalibrationDetailView.as_view()),
        name="calibration-detail",
    ),
    path(
        "calibrations/<int:calibration_id>/adopt",
        no_append_slash(CalibrationAdoptView.as_view()),
        name="calibration-adopt",
    ),
]
