"""The keys' Prometheus metrics: a counter fed by their signals, and gauges
read at scrape (imported only while IDEMPOTENCY["METRICS"] is on)."""

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily

from . import signals
from .console.panels import count_up_to
from .models import IdempotencyRecord

# Labels a view's code chooses, never the scope (one per client) or the key.
keys = Counter(
    "once_keys",
    "Keyed requests by what was decided: claimed, replayed, conflict, "
    "mismatch or failed.",
    ["operation", "mode", "outcome"],
)


def _counting(outcome):
    def receiver(sender, *, operation, mode, **kwargs):
        keys.labels(operation, mode, outcome).inc()

    return receiver


RECEIVERS = [
    (signals.key_claimed, _counting("claimed")),
    (signals.key_replayed, _counting("replayed")),
    (signals.key_conflict, _counting("conflict")),
    (signals.key_mismatch, _counting("mismatch")),
    (signals.key_failed, _counting("failed")),
]


def gauges(now):
    records = IdempotencyRecord.objects
    yield GaugeMetricFamily(
        "once_keys_pending",
        "Keys claimed and not yet answered (counted up to 10001).",
        value=count_up_to(records.filter(state=IdempotencyRecord.State.PENDING)),
    )
    yield GaugeMetricFamily(
        "once_keys_stuck_leases",
        "Pending keys whose lease ran out: their worker died or hangs "
        "(counted up to 10001).",
        value=count_up_to(records.stuck(now)),
    )
