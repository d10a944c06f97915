"""Producers that break an outbox guarantee on purpose: the kit must say which.

Each is the kind of mistake the outbox kit exists to catch: an event recorded
after its change committed, or sent straight to the broker.
"""

import uuid

from celery import Celery
from django.db import transaction
from django.urls import include, path
from kombu import Connection, Exchange, Queue
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency.mixins import IdempotencyMixin
from idempotency.shared.headers import MESSAGE_ID_HEADER
from outbox.api import record
from tests.testapp.models import Widget

# A Celery app of the tests' own, on a broker in this process.
kit_app = Celery("kit-events", broker="memory://", set_as_current=False)
EVENTS = Exchange("kit-events", type="topic")


@kit_app.task(name="kit.make_widget")
def make_widget(*, payload, **kwargs):
    """The consumer of widget.created."""
    Widget.objects.create(name=f"made-{payload['name']}")


class EventOnCommitView(IdempotencyMixin, APIView):
    """Records its event once its change has committed, on its own: a process
    that dies between the two commits keeps the widget and loses the event."""

    idempotency_operation = "broken.event-on-commit"

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        transaction.on_commit(
            lambda: record(
                "widget",
                widget.pk,
                "widget.created",
                {"name": widget.name},
                require_transaction=False,
            )
        )
        return Response({"id": widget.pk}, status=201)


class TaskStraightToTheBrokerView(IdempotencyMixin, APIView):
    """Sends the consumer's task itself instead of recording the event."""

    idempotency_operation = "broken.task-straight-to-the-broker"

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        make_widget.delay(
            event_type="widget.created", payload={"name": widget.name}, headers={}
        )
        return Response({"id": widget.pk}, status=201)


@kit_app.task(name="kit.tell_the_warehouse")
def tell_the_warehouse(*, widget, **kwargs):
    """A consumer of another system, sent past the outbox."""


class EventAndTaskOnCommitView(IdempotencyMixin, APIView):
    """Records its event with its change, and also tells the warehouse with a
    task sent once the change commits: a process dying between the commit
    and the send keeps the widget and its event, and the warehouse never
    hears of it."""

    idempotency_operation = "broken.event-and-task-on-commit"

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        record("widget", widget.pk, "widget.created", {"name": widget.name})
        transaction.on_commit(lambda: tell_the_warehouse.delay(widget=widget.pk))
        return Response({"id": widget.pk}, status=201)


class TaskWithAMessageIdView(IdempotencyMixin, APIView):
    """Sends the consumer's task itself, headed with a message id as the
    relay heads its deliveries, so that the inbox dedupes it: still past the
    outbox, sent before the change commits."""

    idempotency_operation = "broken.task-with-a-message-id"

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        make_widget.apply_async(
            kwargs={"event_type": "widget.created", "payload": {"name": widget.name}},
            headers={MESSAGE_ID_HEADER: str(uuid.uuid4())},
        )
        return Response({"id": widget.pk}, status=201)


def event_before_its_change(name):
    """Records the event on its own, then makes the change in autocommit: a
    process that dies between the two keeps the event of a change never made."""
    record("widget", name, "widget.created", {"name": name}, require_transaction=False)
    Widget.objects.create(name=name)


def publish_straight_to_the_broker(name):
    """Makes the change, then publishes the event with kombu itself."""
    with transaction.atomic():
        Widget.objects.create(name=name)
    queue = Queue("kit-widgets", EVENTS, routing_key="widget.#")
    with Connection("memory://") as connection:
        connection.Producer().publish(
            {"name": name},
            exchange=EVENTS,
            routing_key="widget.created",
            declare=[queue],
        )


urlpatterns = [
    path("", include("tests.testapp.urls")),
    path("broken/event-on-commit/", EventOnCommitView.as_view()),
    path("broken/task-straight/", TaskStraightToTheBrokerView.as_view()),
    path("broken/event-and-task/", EventAndTaskOnCommitView.as_view()),
    path("broken/task-with-a-message-id/", TaskWithAMessageIdView.as_view()),
]
