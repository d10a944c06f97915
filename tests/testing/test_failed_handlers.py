"""The webhook kit's failure case: a handler whose work fails must raise, so
its receipt is retried; one that swallows the failure has the receipt marked
processed and the event lost, and the kit says so."""

import pytest
from django.contrib.auth import get_user_model
from django.test import TransactionTestCase

from idempotency.shared.testing.guarantees import GuaranteeBroken
from tests.testapp.models import Order, Widget
from tests.testing import broken
from tests.testing.helpers import broken_message
from tests.webhooks.conftest import handler_registry  # noqa: F401 (a fixture)
from webhooks.testing import deliveries
from webhooks.testing.deliveries import Webhook
from webhooks.testing.suites import WebhookSuite

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("handler_registry"),
]
SOURCE = "stripe"


def an_order():
    owner, _ = get_user_model().objects.get_or_create(username="payer")
    order = Order.objects.create(owner=owner, sku="BOOK-1", quantity=1)
    return {"order": order.pk}


def effects():
    return {
        "paid": Order.objects.filter(status="paid").count(),
        "notes": Widget.objects.count(),
    }


def pay(event):
    order = Order.objects.select_for_update().get(pk=event.data["order"])
    order.status = "paid"
    order.save(update_fields=["status"])
    Widget.objects.create(name=f"paid {order.pk}")


def payments(handler, event_type) -> Webhook:
    broken.register(SOURCE, event_type, handler)
    return Webhook(SOURCE, event_type, an_order, effects)


def test_the_case_holds_for_a_handler_that_lets_its_failure_raise():
    deliveries.check_webhook_failure(payments(pay, "kit.paid"))


def test_a_handler_swallowing_its_failure_is_reported_processed_and_lost():
    webhook = payments(broken.pays_swallowing_failures, "kit.paid-swallowed")

    message = broken_message(deliveries.check_webhook_failure, webhook)

    assert message.startswith(f"Guarantee broken: {deliveries.FAILED_WEBHOOK}")
    assert "returned instead of raising, so the receipt is marked processed" in (
        message
    )
    assert "paid: the effect was lost" in message
    assert "notes: the effect was lost" in message


class SwallowingSuite(WebhookSuite):  # run by hand below, not collected
    source = SOURCE
    event_type = "kit.paid-swallowed"

    def body(self):
        return an_order()

    def effects(self):
        return effects()


def test_the_suite_reports_a_swallowed_failure():
    broken.register(SOURCE, "kit.paid-swallowed", broken.pays_swallowing_failures)

    with pytest.raises(GuaranteeBroken, match="marks it processed and loses it"):
        SwallowingSuite().test_a_failed_handler_is_retried_and_applied_once()


@pytest.mark.usefixtures("handler_registry")
class UnittestStyle(TransactionTestCase):
    """The check as a unittest ``TransactionTestCase`` calls it."""

    def test_a_swallowed_failure_fails_the_test_case(self):
        webhook = payments(broken.pays_swallowing_failures, "kit.paid-swallowed")
        with self.assertRaisesRegex(GuaranteeBroken, "returned instead of raising"):
            deliveries.check_webhook_failure(webhook)
