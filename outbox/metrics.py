"""The outbox's Prometheus metrics: counters and histograms fed by its
signals, and gauges read at scrape (imported only while
IDEMPOTENCY["METRICS"] is on)."""

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from idempotency.console.panels import count_up_to

from . import signals
from .models import OutboxMessage

events = Counter(
    "once_outbox_events",
    "Events by what happened: recorded, published, publish_failed (stays "
    "pending), dead, or requeued by an operator.",
    ["outcome"],
)
# Each at 0 from the start: a series that appears only at its first count is
# absent until then, and the relay alert's "recorded > published" compares
# with nothing (stays silent) while a relay has published nothing at all.
for _outcome in ("recorded", "published", "publish_failed", "dead", "requeued"):
    events.labels(_outcome)
batch_seconds = Histogram(
    "once_outbox_relay_batch_seconds",
    "How long the relay took to publish a batch and write it back (batches "
    "that published at least one event).",
)
publish_lag = Histogram(
    "once_outbox_publish_lag_seconds",
    "From an event's recording to its publish written back.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)


def _counting(outcome):
    def receiver(sender, *, count=1, **kwargs):
        events.labels(outcome).inc(count)

    return receiver


def on_published(sender, *, count, lags, seconds=None, **kwargs):
    events.labels("published").inc(count)
    for lag in lags:
        # Negative when the recording host's clock is ahead of the relay's:
        # it would lower the histogram's _sum, which rate() reads as a reset.
        publish_lag.observe(max(lag, 0))
    if seconds is not None:
        batch_seconds.observe(seconds)


RECEIVERS = [
    (signals.event_recorded, _counting("recorded")),
    (signals.events_published, on_published),
    (signals.publish_failed, _counting("publish_failed")),
    (signals.event_dead, _counting("dead")),
    (signals.events_requeued, _counting("requeued")),
]


def gauges(now):
    messages = OutboxMessage.objects
    age = messages.oldest_pending_age(now)
    yield GaugeMetricFamily(
        "once_outbox_backlog",
        "Events recorded and not yet published (counted up to 10001).",
        value=count_up_to(messages.pending()),
    )
    yield GaugeMetricFamily(
        "once_outbox_oldest_pending_age_seconds",
        "Age of the oldest unpublished event, from when it was recorded; 0 "
        "when none waits.",
        value=age.total_seconds() if age else 0,
    )
    yield GaugeMetricFamily(
        "once_outbox_retrying",
        "Unpublished events whose last attempt failed (counted up to 10001).",
        value=count_up_to(messages.pending().exclude(last_error="")),
    )
    yield GaugeMetricFamily(
        "once_outbox_dead",
        "Events that ran out of attempts (counted up to 10001).",
        value=count_up_to(messages.dead()),
    )
