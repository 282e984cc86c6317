"""The compatibility endpoints, included under /api/ (config/urls.py): Dify's External Knowledge
API at /api/dify/retrieval (Dify's endpoint setting: {host}/api/dify) and the OpenAI vector-store
reads at /api/openai/v1/vector_stores... (an OpenAI client's base_url: {host}/api/openai/v1)."""

from django.urls import path
from django.views.decorators.common import no_append_slash

from retrieval.compat.dify import DifyRetrievalView
from retrieval.compat.vector_stores import (
    VectorStoreDetailView,
    VectorStoreListView,
    VectorStoreSearchView,
)

# Exact paths, as the API's: no redirect that adds a slash (a redirected POST loses its body).
urlpatterns = [
    path("dify/retrieval", no_append_slash(DifyRetrievalView.as_view()), name="dify-retrieval"),
    path(
        "openai/v1/vector_stores",
        no_append_slash(VectorStoreListView.as_view()),
        name="openai-vector-stores",
    ),
    path(
        "openai/v1/vector_stores/<str:vector_store_id>",
        no_append_slash(VectorStoreDetailView.as_view()),
        name="openai-vector-store",
    ),
    path(
        "openai/v1/vector_stores/<str:vector_store_id>/search",
        no_append_slash(VectorStoreSearchView.as_view()),
        name="openai-vector-store-search",
    ),
]
