"""An answer whose replayed headers the record cannot store (a NUL in one,
which jsonb refuses) keeps its work and reaches its client; a retry is told
the answer was not kept, never a DataError after the work (DESIGN rule 12)."""

import json

import pytest
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency.mixins import IdempotencyMixin
from idempotency.models import IdempotencyRecord
from tests.testapp.models import Widget

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls(__name__)]


def view(mode):
    class Created(IdempotencyMixin, APIView):
        idempotency_operation = f"headers.{mode}"
        idempotency_mode = mode

        def post(self, request):
            if mode == "steps":
                request.idempotency.step("note", lambda key: key)
            widget = Widget.objects.create(name="w")
            response = Response({"id": widget.pk}, status=201)
            # The client's text in a Location: Django refuses only \r and \n.
            response["Location"] = f"/widgets/{request.data['slug']}/"
            return response

    return Created.as_view()


MODES = ["atomic", "lease", "steps"]
urlpatterns = [path(f"{mode}/", view(mode)) for mode in MODES]


@pytest.mark.parametrize("mode", MODES)
def test_a_header_holding_a_nul_keeps_the_work_and_a_retry_is_told(api, mode):
    first = api.post(f"/{mode}/", {"slug": "a\x00b"}, key="k")

    assert first.status_code == 201
    assert first["Location"] == "/widgets/a\x00b/"
    assert Widget.objects.count() == 1
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.status_code) == ("completed", 201)
    assert record.response_body is None

    retry = api.post(f"/{mode}/", {"slug": "a\x00b"}, key="k")
    assert retry.status_code == 409
    assert json.loads(retry.content)["type"].endswith("/answer-not-kept")
    assert Widget.objects.count() == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_header_with_text_beyond_latin_1_is_replayed_as_sent(api, mode):
    first = api.post(f"/{mode}/", {"slug": "caf\u00e9-\U0001f600"}, key="k")
    retry = api.post(f"/{mode}/", {"slug": "caf\u00e9-\U0001f600"}, key="k")

    assert retry["Idempotent-Replayed"] == "true"
    assert retry["Location"] == first["Location"]
    assert retry.content == first.content
    assert Widget.objects.count() == 1
