"""The outbox's counters and histograms, fed by record() and the relay."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from outbox import relay
from outbox.api import record
from outbox.models import OutboxMessage
from outbox.publishers import InMemoryPublisher
from tests.idempotency.prometheus.scraping import METRICS_ON, scrape, value

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def failing(steady_backoff):
    InMemoryPublisher.failing = True
    yield
    InMemoryPublisher.failing = False


def counts(scraped):
    return {
        "recorded": value(scraped, "once_outbox_events_total", outcome="recorded"),
        "published": value(scraped, "once_outbox_events_total", outcome="published"),
        "failed": value(scraped, "once_outbox_events_total", outcome="publish_failed"),
        "lags": value(scraped, "once_outbox_publish_lag_seconds_count"),
        "batches": value(scraped, "once_outbox_relay_batch_seconds_count"),
    }


def delta(before, after):
    return {name: after[name] - before[name] for name in before}


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_recorded_published_one_lag_per_event_and_one_time_per_batch(client):
    before = counts(scrape(client))
    with transaction.atomic():
        for n in range(3):
            record("order", n, "order.created", {"n": n})
    assert delta(before, counts(scrape(client)))["recorded"] == 3

    relay.drain(batch_size=2)

    assert delta(before, counts(scrape(client))) == {
        "recorded": 3,
        "published": 3,
        "failed": 0,
        "lags": 3,
        "batches": 2,
    }


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_a_rolled_back_record_is_not_counted(client):
    before = counts(scrape(client))
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        record("order", 1, "order.created", {})
        1 / 0  # noqa: B018

    assert delta(before, counts(scrape(client)))["recorded"] == 0


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_a_failed_publish_is_counted_and_times_no_batch(client, failing):
    with transaction.atomic():
        record("order", 1, "order.created", {})
    before = counts(scrape(client))

    relay.drain()

    assert delta(before, counts(scrape(client)))["failed"] == 1
    assert delta(before, counts(scrape(client)))["batches"] == 0


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_an_event_recorded_by_a_host_whose_clock_is_ahead_never_lowers_the_lag_sum(
    client,
):
    # A histogram's _sum is a counter to Prometheus: a negative observation
    # lowers it, which rate() reads as a reset (a spike).
    before = value(scrape(client), "once_outbox_publish_lag_seconds_sum")
    with transaction.atomic():
        record("order", 1, "order.created", {})
    OutboxMessage.objects.update(created_at=timezone.now() + timedelta(seconds=30))

    relay.drain()

    after = scrape(client)
    assert value(after, "once_outbox_publish_lag_seconds_sum") >= before
    assert value(after, "once_outbox_publish_lag_seconds_bucket", le="0.05") >= 1
