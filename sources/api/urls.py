"""The sources' API paths, mounted under /api/v1/ (config/urls.py). Exact paths: no redirect
that adds a slash (a redirected POST loses its body)."""

from django.urls import path
from django.views.decorators.common import no_append_slash

from sources.api.views import (
    KnowledgeBaseSourcesView,
    SourceDetailView,
    SourceRunConfirmView,
    SourceRunDetailView,
    SourceRunKeepView,
    SourceRunListView,
    SourceSyncView,
)

urlpatterns = [
    path(
        "kbs/<str:kb>/sources",
        no_append_slash(KnowledgeBaseSourcesView.as_view()),
        name="source-list",
    ),
    path(
        "sources/<int:source_id>",
        no_append_slash(SourceDetailView.as_view()),
        name="source-detail",
    ),
    path(
        "sources/<int:source_id>/sync",
        no_append_slash(SourceSyncView.as_view()),
        name="source-sync",
    ),
    path(
        "sources/<int:source_id>/runs",
        no_append_slash(SourceRunListView.as_view()),
        name="source-run-list",
    ),
    path(
        "sources/<int:source_id>/runs/<int:run_id>",
        no_append_slash(SourceRunDetailView.as_view()),
        name="source-run-detail",
    ),
    path(
        "sources/<int:source_id>/runs/<int:run_id>/confirm",
        no_append_slash(SourceRunConfirmView.as_view()),
        name="source-run-confirm",
    ),
    path(
        "sources/<int:source_id>/runs/<int:run_id>/keep",
        no_append_slash(SourceRunKeepView.as_view()),
        name="source-run-keep",
    ),
]
