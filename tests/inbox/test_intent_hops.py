"""Three hops, one intent: a keyed request records an event, a consumer on a
real Celery worker records another, and a second consumer still names the
request's intent. Each hop derives keys of its own."""

import json
import uuid

import pytest
from kombu import Connection, Queue

from idempotency.shared import units
from inbox.models import InboxMessage
from outbox import relay
from outbox.models import OutboxMessage
from outbox.publishers import CeleryTaskPublisher
from tests.faults.processes import celery_worker, send_task, wait_until
from tests.inbox import hop_consumers  # noqa: F401  (registers the tasks here too)
from tests.servers import AMQP_URL

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

KEY = "order-key-that-stays-with-the-client"


@pytest.fixture
def worker(tmp_path):
    # RabbitMQ, on a queue of this test's own: no shared Redis database.
    queue = f"intent-hops-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "hops.jsonl"
    with celery_worker(
        queue,
        broker_url=AMQP_URL,
        app="tests.inbox.hop_worker",
        settings="tests.inbox.worker_settings",
        HOPS_LOG=str(log),
    ) as running:
        running.queue, running.hops = queue, log
        yield running
    with Connection(AMQP_URL) as connection:
        Queue(queue).bind(connection.default_channel).delete()


def runs(worker) -> list[dict]:
    if not worker.hops.exists():
        return []
    return [json.loads(line) for line in worker.hops.read_text().splitlines()]


def test_the_third_hop_names_the_intent_of_the_request_that_started_it(
    api, user, worker
):
    publisher = CeleryTaskPublisher(
        tasks={
            "order.created": "intent_tests.book_shipment",
            "shipment.booked": "intent_tests.send_receipt",
        },
        queue=worker.queue,
        broker_url=AMQP_URL,
    )
    request = units.Unit(units.KEYS, (f"user:{user.pk}", "order.create", KEY))

    # Hop 1: the keyed request records order.created with its intent.
    response = api.post("/api/orders/", {"sku": "BOOK-1", "quantity": 1}, key=KEY)
    assert response.status_code == 201
    order_created = OutboxMessage.objects.get(type="order.created")
    assert order_created.headers["once-intent"] == request.intent
    assert relay.drain(publisher=publisher).published == 1

    # Hop 2: the shipping consumer fails once, is redelivered, and records.
    wait_until(
        lambda: OutboxMessage.objects.filter(type="shipment.booked").exists(),
        "the shipping consumer never recorded shipment.booked",
        worker=worker,
    )
    assert relay.drain(publisher=publisher).published == 1

    # Hop 3: the mailer.
    wait_until(
        lambda: InboxMessage.objects.filter(subscriber="intent-tests.mailer").exists(),
        "the mailer never ran",
        worker=worker,
    )
    first, redelivered, mailer = runs(worker)
    assert (first["hop"], redelivered["hop"], mailer["hop"]) == (
        "shipping",
        "shipping",
        "mailer",
    )
    # The last hop serves the request's intent, inherited hop by hop.
    assert mailer["intent"] == mailer["inherited"] == request.intent
    shipment_booked = OutboxMessage.objects.get(type="shipment.booked")
    assert shipment_booked.headers["once-intent"] == request.intent
    # A redelivery is the same unit: the same derived key, the same intent.
    assert first == redelivered
    assert first["parts"] == ["intent-tests.shipping", str(order_created.id)]
    assert first["intent"] == request.intent
    # Each hop derives keys of its own.
    derived = {request.derive("ship"), first["derived"], mailer["derived"]}
    assert len(derived) == 3
    # The client's key is in none of them.
    for value in (*derived, request.intent):
        assert KEY not in value


def test_a_task_carries_the_intent_in_its_own_headers_across_a_retry(worker):
    intent = units.Unit(units.WEBHOOKS, ("github", "d-1")).intent
    send_task(
        "intent_tests.bare",
        queue=worker.queue,
        kwargs={"payload": {}},
        headers={"once-message-id": "m-1", "once-intent": intent},
        broker_url=AMQP_URL,
    )

    wait_until(
        lambda: InboxMessage.objects.filter(subscriber="intent-tests.bare").exists(),
        "the bare consumer never applied",
        worker=worker,
    )
    first, retried = runs(worker)
    assert first == retried
    assert first["parts"] == ["intent-tests.bare", "m-1"]
    assert first["intent"] == intent
