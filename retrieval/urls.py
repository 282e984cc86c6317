from django.urls import path

from retrieval.api import (
    ChunkExplainView,
    DocumentDetailView,
    DocumentListView,
    KnowledgeBaseListView,
    SearchView,
)

urlpatterns = [
    path("search", SearchView.as_view(), name="search"),
    path("chunks/<int:chunk_id>/explain", ChunkExplainView.as_view(), name="chunk-explain"),
    path("kbs/", KnowledgeBaseListView.as_view(), name="kb-list"),
    path("kbs/<str:kb>/documents/", DocumentListView.as_view(), name="document-list"),
    path("documents/<int:document_id>", DocumentDetailView.as_view(), name="document-detail"),
]
