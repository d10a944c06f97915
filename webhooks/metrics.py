"""The webhooks' Prometheus metrics: counters fed by their signals, and gauges
read at scrape (imported only while IDEMPOTENCY["METRICS"] is on)."""

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily

from idempotency.console.panels import count_up_to

from . import signals
from .conf import webhooks_settings
from .models import WebhookReceipt

# By configured source, never the delivery id.
deliveries = Counter(
    "once_webhooks_deliveries",
    "Deliveries by what happened: accepted, duplicate, processed, skipped (no "
    "handler) or failed.",
    ["source", "outcome"],
)
rejections = Counter(
    "once_webhooks_rejections",
    "Deliveries refused at intake, by source and reason (the problem type).",
    ["source", "reason"],
)
replays = Counter(
    "once_webhooks_replayed",
    "Receipts an operator replayed from the console (forced: processed ones "
    "run again).",
    ["forced"],
)
UNKNOWN = "unknown"


def source_label(source) -> str:
    """The source as a label: a configured source's name, else "unknown".

    Whatever a URL says never becomes a label value: anyone could add one
    per request. A failed receipt that is gone has no source ("").
    """
    return source if source in webhooks_settings.SOURCES else UNKNOWN


def _counting(outcome):
    def receiver(sender, *, source="", **kwargs):
        deliveries.labels(source_label(source), outcome).inc()

    return receiver


def on_processed(sender, *, source, state, **kwargs):
    # processed, or skipped: no handler was registered for its event type.
    deliveries.labels(source_label(source), state).inc()


def on_replayed(sender, *, count, forced, **kwargs):
    replays.labels("true" if forced else "false").inc(count)


def on_rejected(sender, *, source, reason, **kwargs):
    rejections.labels(source_label(source), reason).inc()


RECEIVERS = [
    (signals.delivery_accepted, _counting("accepted")),
    (signals.delivery_duplicate, _counting("duplicate")),
    (signals.delivery_processed, on_processed),
    (signals.delivery_failed, _counting("failed")),
    (signals.delivery_replayed, on_replayed),
    (signals.delivery_rejected, on_rejected),
]


def gauges(now):
    receipts = WebhookReceipt.objects
    waiting = GaugeMetricFamily(
        "once_webhooks_receipts_waiting",
        "Receipts stored and not yet processed, by source (counted up to 10001).",
        labels=["source"],
    )
    failed = GaugeMetricFamily(
        "once_webhooks_receipts_failed",
        "Receipts whose handlers failed, by source (counted up to 10001).",
        labels=["source"],
    )
    # Per configured source, as the console counts them: bounded label values.
    for source in webhooks_settings.SOURCES:
        of_source = receipts.filter(source=source)
        waiting.add_metric(
            [source], count_up_to(of_source.filter(state=WebhookReceipt.State.RECEIVED))
        )
        failed.add_metric(
            [source], count_up_to(of_source.filter(state=WebhookReceipt.State.FAILED))
        )
    yield waiting
    yield failed
