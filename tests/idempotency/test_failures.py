"""A failed first attempt leaves no effect, says failed, and lets a retry run."""

import json

import pytest
from django.db import IntegrityError
from rest_framework import viewsets
from rest_framework.test import APIRequestFactory, force_authenticate

from idempotency.mixins import IdempotencyMixin
from idempotency.models import IdempotencyRecord
from idempotency.shared.steps import Abandon
from outbox.api import record
from outbox.models import OutboxMessage
from tests.testapp import views
from tests.testapp.models import Widget
from tests.testapp.views import WidgetSerializer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("raise", RuntimeError),
        # The view succeeded; its transaction failed at COMMIT (a deferred
        # constraint): no success is stored.
        ("commit", IntegrityError),
    ],
)
def test_view_raising_rolls_back_and_records_failed_then_the_retry_succeeds(
    api, fault, error
):
    views.faults[fault] = 1
    with pytest.raises(error):
        api.post("/t/widgets/", {"name": "a"}, key="k")

    assert Widget.objects.count() == 0
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.attempts) == ("failed", 1)

    retry = api.post("/t/widgets/", {"name": "a"}, key="k")
    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry
    assert Widget.objects.count() == 1
    record.refresh_from_db()
    assert (record.state, record.attempts) == ("completed", 2)


def test_view_returning_500_rolls_back_and_is_not_replayed(api):
    views.faults["500"] = 2
    assert api.post("/t/widgets/", {"name": "a"}, key="k").status_code == 500
    assert api.post("/t/widgets/", {"name": "a"}, key="k").status_code == 500

    assert Widget.objects.count() == 0
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.attempts) == ("failed", 2)

    retry = api.post("/t/widgets/", {"name": "a"}, key="k")
    assert retry.status_code == 201
    assert Widget.objects.count() == 1


def test_unstorable_status_from_the_view_rolls_back_and_is_retried(api):
    views.faults["409"] = 1
    assert api.post("/t/widgets/", {"name": "a"}, key="k").status_code == 409
    assert Widget.objects.count() == 0

    retry = api.post("/t/widgets/", {"name": "a"}, key="k")
    assert retry.status_code == 201
    assert Widget.objects.count() == 1


def test_a_failed_key_still_refuses_a_different_payload(api):
    views.faults["500"] = 1
    api.post("/t/widgets/", {"name": "a"}, key="k")

    assert api.post("/t/widgets/", {"name": "b"}, key="k").status_code == 422
    assert Widget.objects.count() == 0


def test_custom_store_status_policy_is_honoured(api, settings):
    settings.IDEMPOTENCY = {"STORE_STATUS": "tests.testapp.policies.only_2xx"}
    views.faults["402"] = 1
    first = api.post("/t/widgets/", {"name": "a"}, key="k")
    assert first.status_code == 402
    assert IdempotencyRecord.objects.get().state == "failed"
    assert Widget.objects.count() == 0

    retry = api.post("/t/widgets/", {"name": "a"}, key="k")
    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry


@pytest.mark.parametrize(
    ("url", "data"), [("/t/widgets/", {"name": "a"}), ("/t/charge/", {})]
)
def test_a_raised_client_error_under_atomic_requests_is_stored_without_its_work(
    api, monkeypatch, url, data
):
    # DRF's handler marks the request's transaction for rollback: the view's
    # work goes, its 404 is stored and replays (atomic and lease mode).
    from django.db import connection

    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    views.faults["not-found"] = 1
    first = api.post(url, data, key="k")
    assert first.status_code == 404
    assert Widget.objects.count() == 0
    assert IdempotencyRecord.objects.get().state == "completed"

    again = api.post(url, data, key="k")
    assert (again.status_code, again["Idempotent-Replayed"]) == (404, "true")
    assert again.content == first.content


class AbandoningViewSet(IdempotencyMixin, viewsets.ModelViewSet):
    """Gives the operation up after its write, as a risk check may."""

    queryset = Widget.objects.all()
    serializer_class = WidgetSerializer
    idempotency_operation = "widgets.abandon"
    runs = 0

    def perform_create(self, serializer):
        type(self).runs += 1
        widget = serializer.save()
        record("widget", widget.pk, "widget.created", {"widget": widget.pk})
        raise Abandon("the risk check flagged the buyer")


def abandoning_post(user, key=None, **initkwargs):
    view = AbandoningViewSet.as_view({"post": "create"}, **initkwargs)
    headers = {"Idempotency-Key": key} if key else {}
    request = APIRequestFactory().post(
        "/widgets/", {"name": "w"}, format="json", headers=headers
    )
    force_authenticate(request, user)
    return view(request)


@pytest.mark.parametrize("mode", ["atomic", "lease"])
def test_abandon_in_a_view_without_steps_rolls_back_and_its_answer_is_replayed(
    user, mode
):
    """Abandon gives the operation up in every mode: with no steps to undo,
    its work rolls back, and the abandon is the answer a retry replays. It
    was a 500 that each retry ran the view again for."""
    AbandoningViewSet.runs = 0

    first = abandoning_post(user, "k", idempotency_mode=mode)
    retry = abandoning_post(user, "k", idempotency_mode=mode)

    assert first.status_code == retry.status_code == 422
    body = json.loads(retry.content)
    assert body["type"].endswith("/operation-abandoned")
    assert body["detail"] == "the risk check flagged the buyer"
    assert retry.has_header("Idempotent-Replayed")
    assert AbandoningViewSet.runs == 1
    assert not Widget.objects.exists()
    assert not OutboxMessage.objects.exists()
    assert IdempotencyRecord.objects.get().state == "completed"


def test_abandon_in_a_view_without_a_key_rolls_back_and_keeps_nothing(user):
    response = abandoning_post(user, idempotency_required=False)

    assert response.status_code == 422
    assert json.loads(response.content)["type"].endswith("/operation-abandoned")
    assert not Widget.objects.exists()
    assert not OutboxMessage.objects.exists()
    assert not IdempotencyRecord.objects.exists()
