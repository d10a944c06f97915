"""A body too deep to parse is the client's 400; the view's own recursion is not."""

import pytest
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency.mixins import IdempotencyMixin
from idempotency.models import IdempotencyRecord

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

TOO_DEEP = b"[" * 100_000 + b"]" * 100_000


class RecursiveView(IdempotencyMixin, APIView):
    idempotency_operation = "rendering.recursive"
    idempotency_required = False

    def post(self, request):
        def forever():
            return forever()

        return Response({"depth": forever()})


class ParsersView(IdempotencyMixin, APIView):
    idempotency_operation = "rendering.parsers"
    idempotency_required = False

    def post(self, request):
        request.data  # noqa: B018 (parsed, as a view does)
        patched = [type(p).__name__ for p in request.parsers if "parse" in vars(p)]
        return Response({"patched": patched}, status=201)


urlpatterns = [
    path("recursive/", RecursiveView.as_view()),
    path("parsers/", ParsersView.as_view()),
]


def test_the_views_own_recursion_is_a_server_error_not_the_bodys(api):
    with pytest.raises(RecursionError):
        api.post("/recursive/", {"name": "a"})


def test_a_body_too_deep_for_the_parser_is_a_400_without_a_key(api):
    response = api.post("/parsers/", TOO_DEEP)

    assert response.status_code == 400
    assert response.json()["type"].endswith("/body-too-deep")
    assert IdempotencyRecord.objects.count() == 0


def test_the_requests_parsers_are_not_patched(api):
    response = api.post("/parsers/", {"name": "a"}, key="k1")

    assert response.status_code == 201
    assert response.json() == {"patched": []}
