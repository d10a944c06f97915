"""The inbox's Prometheus metrics: a counter fed by its signals, and a gauge
read at scrape (imported only while IDEMPOTENCY["METRICS"] is on)."""

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily

from idempotency.console.panels import count_up_to

from . import signals
from .models import InboxMessage

# By subscriber (a name in the code), never the message id.
messages = Counter(
    "once_inbox_messages",
    "Messages by what the inbox decided: received (applied), duplicate "
    "(a redelivery dropped), abandoned (given up by its consumer), dead (its "
    "attempts ran out) or replayed (a dead one, by an operator).",
    ["subscriber", "outcome"],
)


def _counting(outcome):
    def receiver(sender, *, subscriber, **kwargs):
        messages.labels(subscriber, outcome).inc()

    return receiver


def on_replayed(sender, **kwargs):
    # Per replayed message, by its subscriber (never its id). Its argument
    # "messages" is read from kwargs: the name is this module's counter's.
    for replayed in kwargs["messages"]:
        messages.labels(replayed["subscriber"], "replayed").inc()


RECEIVERS = [
    (signals.message_received, _counting("received")),
    (signals.duplicate_dropped, _counting("duplicate")),
    (signals.message_abandoned, _counting("abandoned")),
    (signals.message_dead, _counting("dead")),
    (signals.messages_replayed, on_replayed),
]


def gauges(now):
    yield GaugeMetricFamily(
        "once_inbox_dead_messages",
        "Messages no attempt could apply, kept for a replay (counted up to 10001).",
        value=count_up_to(InboxMessage.objects.dead()),
    )
