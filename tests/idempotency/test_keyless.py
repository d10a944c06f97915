"""A guarded view with idempotency_required=False answers a request without a
key too: its work commits as a keyed request's does, in one transaction, so
the quickstart's view (its order and the order's event) keeps them together."""

import json

import pytest
from rest_framework import viewsets
from rest_framework.test import APIRequestFactory, force_authenticate

from idempotency.mixins import IdempotencyMixin
from idempotency.models import IdempotencyRecord
from outbox.api import record
from outbox.models import OutboxMessage
from tests.testapp.models import Widget
from tests.testapp.views import WidgetSerializer

pytestmark = pytest.mark.django_db(transaction=True)


class OptionalKeyViewSet(IdempotencyMixin, viewsets.ModelViewSet):
    """The quickstart's view, with keys made optional."""

    queryset = Widget.objects.all()
    serializer_class = WidgetSerializer
    idempotency_operation = "widgets.create"
    idempotency_required = False
    fail_after_the_write = False

    def perform_create(self, serializer):
        widget = serializer.save()
        record("widget", widget.pk, "widget.created", {"widget": widget.pk})
        if self.fail_after_the_write:
            raise RuntimeError("the process fails after the write")


def post(user, **initkwargs):
    view = OptionalKeyViewSet.as_view({"post": "create"}, **initkwargs)
    request = APIRequestFactory().post(
        "/widgets/", json.dumps({"name": "w"}), content_type="application/json"
    )
    force_authenticate(request, user)
    return view(request)


def test_a_keyless_request_commits_its_write_and_its_event_together(user):
    response = post(user)

    assert response.status_code == 201, response
    assert Widget.objects.count() == 1
    assert OutboxMessage.objects.get().type == "widget.created"
    assert not IdempotencyRecord.objects.exists()  # nothing stored without a key


def test_a_keyless_request_that_fails_rolls_its_write_and_event_back(user):
    with pytest.raises(RuntimeError):
        post(user, fail_after_the_write=True)

    assert not Widget.objects.exists()
    assert not OutboxMessage.objects.exists()
