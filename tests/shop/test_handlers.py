"""The demo's handlers, end to end through /webhooks/<source>/."""

import json
import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from project.shop.models import Order
from tests.webhooks import signing

# The webhook tests' sources (their secrets sign these deliveries), handler
# registry and eager Celery.
from tests.webhooks.conftest import (  # noqa: F401
    eager_celery,
    handler_registry,
    webhook_sources,
)
from webhooks.handlers import handlers_for
from webhooks.models import WebhookReceipt
from webhooks.testing.suites import WebhookSuite

pytestmark = pytest.mark.django_db


@pytest.fixture
def order(user):
    return Order.objects.create(owner=user, sku="BOOK-1", quantity=1)


@pytest.fixture
def send(django_capture_on_commit_callbacks):
    """POST a signed delivery and run what it enqueued, as a worker would."""

    def send(source, body):
        if source == "stripe":
            headers = signing.stripe_headers(body)
        elif source == "github":
            headers = signing.github_headers(body, event="star")
        else:
            headers = signing.standard_headers(body, msg_id=json.loads(body)["id"])
        with django_capture_on_commit_callbacks(execute=True):
            return Client().post(
                f"/webhooks/{source}/",
                body,
                content_type="application/json",
                headers=headers,
            )

    return send


def payment_intent(event_id, event_type, order, created):
    return json.dumps(
        {
            "id": event_id,
            "object": "event",
            "type": event_type,
            "created": created,
            "data": {
                "object": {
                    "id": "pi_1",
                    "object": "payment_intent",
                    "metadata": {"order_id": str(order.pk)},
                }
            },
        }
    ).encode()


def pending_order():
    owner, _ = get_user_model().objects.get_or_create(username="payer")
    return Order.objects.create(owner=owner, sku="BOOK-1", quantity=1)


def paid_orders():
    return Order.objects.filter(status=Order.Status.PAID).count()


class TestStripePayment(WebhookSuite):
    """The proof kit's failure cases against the Stripe payment handlers."""

    source = "stripe"
    event_type = "payment_intent.succeeded"
    older_event_type = "payment_intent.payment_failed"

    def body(self):
        # The kit sets the event's id, type and created.
        order_id = str(pending_order().pk)
        intent = {"object": "payment_intent", "metadata": {"order_id": order_id}}
        return {"object": "event", "data": {"object": intent}}

    def effects(self):
        return paid_orders()

    def state(self, body):
        order_id = body["data"]["object"]["metadata"]["order_id"]
        return Order.objects.get(pk=order_id).status


class TestStandardOrderPaid(WebhookSuite):
    source = "standard"
    event_type = "order.paid"
    # One payment event type: no older event that sets another state.
    test_an_older_event_arriving_late_is_ignored = None

    def body(self):
        return {"data": {"order_id": pending_order().pk}}

    def effects(self):
        return paid_orders()


def test_the_demo_handlers_are_discovered():
    names = [h.__name__ for h in handlers_for("stripe", "payment_intent.succeeded")]
    assert names == ["stripe_payment_succeeded"]


def test_a_stripe_payment_marks_the_order_paid(send, order):
    now = int(time.time())
    body = payment_intent("evt_a", "payment_intent.succeeded", order, now)
    assert send("stripe", body).status_code == 202

    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert order.payment_updated_at.timestamp() == now
    assert WebhookReceipt.objects.get().state == "processed"


def test_events_in_order_leave_the_newest_state(send, order):
    now = int(time.time())
    send("stripe", payment_intent("e1", "payment_intent.payment_failed", order, now))
    assert Order.objects.get().status == Order.Status.PAYMENT_FAILED
    send("stripe", payment_intent("e2", "payment_intent.succeeded", order, now + 5))
    assert Order.objects.get().status == Order.Status.PAID


def test_a_payment_without_an_order_id_is_processed_and_ignored(send, order):
    body = json.dumps(
        {
            "id": "evt_x",
            "type": "payment_intent.succeeded",
            "created": int(time.time()),
            "data": {"object": {"metadata": {}}},
        }
    ).encode()
    assert send("stripe", body).status_code == 202
    assert Order.objects.get().status == Order.Status.PENDING
    assert WebhookReceipt.objects.get().state == "processed"


def test_a_standard_webhooks_order_paid_marks_the_order_paid(send, order):
    body = signing.event_body("msg_1", "order.paid", order_id=order.pk)
    assert send("standard", body).status_code == 202
    assert Order.objects.get().status == Order.Status.PAID


def test_a_github_star_is_processed_not_skipped(send):
    body = json.dumps({"action": "created", "sender": {"login": "octocat"}}).encode()
    assert send("github", body).status_code == 202

    assert WebhookReceipt.objects.get().state == "processed"


def test_a_payment_for_an_unknown_order_fails_visibly(send, order):
    body = payment_intent("evt_a", "payment_intent.succeeded", order, 1)
    body = body.replace(f'"order_id": "{order.pk}"'.encode(), b'"order_id": "999"')
    assert send("stripe", body).status_code == 202
    receipt = WebhookReceipt.objects.get()
    assert receipt.state == "failed"
    assert "DoesNotExist" in receipt.last_error
