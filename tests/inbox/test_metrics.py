"""The inbox's counter: a message applied once, its redeliveries dropped."""

import pytest
from django.test import override_settings

from idempotency.shared.steps import Abandon
from inbox.api import receive, receive_steps
from tests.idempotency.prometheus.scraping import METRICS_ON, scrape, value

pytestmark = pytest.mark.django_db(transaction=True)


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_received_once_and_each_redelivery_counted_as_a_duplicate(client):
    def count(scraped, outcome):
        return value(
            scraped, "once_inbox_messages_total", subscriber="stock", outcome=outcome
        )

    before = scrape(client)
    for _delivery in range(3):
        with receive("stock", "msg-metrics-1"):
            pass

    after = scrape(client)
    assert count(after, "received") - count(before, "received") == 1
    assert count(after, "duplicate") - count(before, "duplicate") == 2
    assert "msg-metrics-1" not in client.get("/metrics").content.decode()


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_a_steps_consumer_giving_its_message_up_is_counted_abandoned(client):
    def count(scraped, outcome):
        return value(
            scraped, "once_inbox_messages_total", subscriber="ship", outcome=outcome
        )

    before = scrape(client)
    with receive_steps("ship", "msg-metrics-2") as delivery:
        delivery.step("book", lambda key: None)
        raise Abandon("the order was cancelled")

    after = scrape(client)
    assert count(after, "abandoned") - count(before, "abandoned") == 1
    assert count(after, "received") - count(before, "received") == 0
