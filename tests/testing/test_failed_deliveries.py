"""The consumer kit's failed-delivery case: a consumer whose work fails must
raise, so its message is redelivered; one that swallows the failure has the
message acked and lost, and the kit says so."""

import uuid

import pytest
from django.db.models import Sum
from django.test import TransactionTestCase

from idempotency.shared.testing.guarantees import GuaranteeBroken
from inbox.testing import consumers
from inbox.testing.consumers import Consumer
from inbox.testing.suites import ConsumerSuite
from tests.testapp.models import Stock
from tests.testapp.tasks import reserve_stock
from tests.testing import broken
from tests.testing.helpers import broken_message, widget_count

pytestmark = pytest.mark.django_db(transaction=True)
SKU = "BOOK-1"


def reservation():
    Stock.objects.get_or_create(sku=SKU, defaults={"on_hand": 1000})
    return {"sku": SKU, "name": f"w-{uuid.uuid4().hex[:12]}", "quantity": 1}


def reserved():
    return Stock.objects.aggregate(total=Sum("reserved"))["total"]


def effects():
    return {"reserved": reserved(), "widgets": widget_count()}


def reserving(consume) -> Consumer:
    return Consumer(consume, "order.created", reservation, effects)


def test_the_case_holds_for_a_consumer_that_lets_its_failure_raise():
    consumers.check_failed_delivery(
        Consumer(reserve_stock, "order.created", reservation, reserved)
    )


def test_a_consumer_swallowing_its_failure_is_reported_acked_and_lost():
    message = broken_message(
        consumers.check_failed_delivery, reserving(broken.reserves_swallowing_failures)
    )

    assert message.startswith(f"Guarantee broken: {consumers.FAILED_DELIVERY}")
    assert "returned instead of raising, so the message is acked" in message
    assert "reserved: the effect was lost" in message


def test_a_failure_caught_inside_the_inbox_block_is_reported_half_done():
    message = broken_message(
        consumers.check_failed_delivery, reserving(broken.notes_swallowing_failures)
    )

    assert "(post_save of testapp.Widget); the consumer returned" in message
    assert "reserved: the effect was lost" in message


def test_a_consumer_without_the_inbox_is_reported_doubled_by_the_redelivery():
    message = broken_message(
        consumers.check_failed_delivery,
        Consumer(broken.applies_before_receive, "widget.wanted", reservation, effects),
    )

    assert "raised InjectedFailure, then the message was redelivered" in message
    assert "widgets: the effect was applied twice" in message


class SwallowingSuite(ConsumerSuite):  # run by hand below, not collected
    consumer = broken.reserves_swallowing_failures
    event_type = "order.created"
    payload = staticmethod(reservation)

    def effects(self):
        return effects()


def test_the_suite_reports_a_swallowed_failure():
    with pytest.raises(GuaranteeBroken, match="acks the message and loses it"):
        SwallowingSuite().test_a_failed_delivery_is_redelivered_and_applied_once()


class UnittestStyle(TransactionTestCase):
    """The check as a unittest ``TransactionTestCase`` calls it."""

    def test_a_swallowed_failure_fails_the_test_case(self):
        with self.assertRaisesRegex(GuaranteeBroken, "returned instead of raising"):
            consumers.check_failed_delivery(
                reserving(broken.reserves_swallowing_failures)
            )
