"""capture_events() and check_published_twice() on the test app's order events."""

from contextlib import suppress

import pytest
from django.db import transaction

from idempotency.shared.testing.guarantees import CannotCheck
from outbox.api import record
from outbox.testing.events import capture_events, check_published_twice
from tests.testapp.models import Stock
from tests.testapp.tasks import reserve_stock
from tests.testing import broken
from tests.testing.helpers import broken_message, widget_count

pytestmark = pytest.mark.django_db(transaction=True)
ORDER = {"sku": "BOOK-1", "quantity": 2}


def reserved():
    return sum(Stock.objects.values_list("reserved", flat=True))


def test_an_orders_event_published_twice_reserves_stock_once(api):
    with capture_events() as events:
        assert api.post("/api/orders/", ORDER, key="k").status_code == 201
        api.post("/api/orders/", ORDER, key="k")  # a replay records nothing

    assert [event.event_type for event in events] == ["order.created"]
    assert events[0].headers["once-message-id"] == events[0].id
    check_published_twice(events, {"order.created": reserve_stock}, reserved)


def test_the_once_events_fixture_captures_the_tests_events(api, once_events):
    api.post("/api/orders/", ORDER, key="k")

    check_published_twice(once_events, reserve_stock, reserved)


def test_a_consumer_without_the_inbox_applies_an_event_published_twice(api):
    with capture_events() as events:
        api.post("/api/orders/", {"sku": "BOOK-1", "quantity": 1}, key="k")
    events = [
        type(event)(**{**event.__dict__, "payload": {"name": "from an order"}})
        for event in events
    ]

    message = broken_message(
        check_published_twice, events, broken.without_inbox, widget_count
    )

    assert message.startswith(
        "Guarantee broken: an event the relay publishes twice reaches its consumer "
        "once.\n"
    )
    assert "order.created" in message
    assert "effects went 0 → 2 (expected 0 → 1)" in message


def test_rolled_back_events_are_not_captured():
    with capture_events() as events, suppress(RuntimeError), transaction.atomic():
        record("order", 1, "order.created", ORDER)
        raise RuntimeError("the change fails after its event was recorded")

    assert events == []
    with pytest.raises(CannotCheck, match="no captured event has a consumer"):
        check_published_twice(events, reserve_stock, reserved)
