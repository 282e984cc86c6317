from django.urls import path
from django.views.decorators.common import no_append_slash

from retrieval.api.citations import RevisionTextView
from retrieval.api.views import (
    ChunkExplainView,
    DocumentDetailView,
    DocumentListView,
    KnowledgeBaseListView,
    KnowledgeBaseMetadataView,
    SearchView,
)

# API paths are exact: no redirect that adds a slash (a redirected POST loses its body).
urlpatterns = [
    path("search", no_append_slash(SearchView.as_view()), name="search"),
    path(
        "chunks/<int:chunk_id>/explain",
        no_append_slash(ChunkExplainView.as_view()),
        name="chunk-explain",
    ),
    path("kbs/", no_append_slash(KnowledgeBaseListView.as_view()), name="kb-list"),
    path(
        "kbs/<str:kb>/documents/",
        no_append_slash(DocumentListView.as_view()),
        name="document-list",
    ),
    path(
        "kbs/<str:kb>/metadata",
        no_append_slash(KnowledgeBaseMetadataView.as_view()),
        name="kb-metadata",
    ),
    path(
        "documents/<int:document_id>",
        no_append_slash(DocumentDetailView.as_view()),
        name="document-detail",
    ),
    path(
        "documents/<int:document_id>/revisions/<int:revision>/text",
        no_append_slash(RevisionTextView.as_view()),
        name="revision-text",
    ),
]
