"""The project's URLs plus views that fail on purpose, for tests/retrieval/test_api_errors.py."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.urls import urlpatterns as project_urlpatterns

SECRET = "s3cret-in-the-traceback"


class FailingView(APIView):
    authentication_classes: list[type] = []
    permission_classes: list[type] = []

    def get(self, request: Request) -> Response:
        raise RuntimeError(SECRET)


def failing_function(request: HttpRequest) -> HttpResponse:
    raise KeyError(SECRET)


def failing_to_encode(request: HttpRequest) -> HttpResponse:
    """Django's DEBUG page itself cannot render this one (it fails encoding the message)."""
    raise ValueError(f"{SECRET} \ud800")


urlpatterns = [
    path("api/v1/_fail/drf", FailingView.as_view()),
    path("api/v1/_fail/function", failing_function),
    path("api/v1/_fail/encoding", failing_to_encode),
    path("elsewhere/_fail", failing_function),
    *project_urlpatterns,
]
