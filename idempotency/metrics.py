"""The keys' Prometheus metrics: a counter fed by their signals, and gauges
read at scrape (imported only while IDEMPOTENCY["METRICS"] is on)."""

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily

from . import signals
from .console.panels import count_up_to, stuck
from .models import IdempotencyRecord
from .shared.steps.models import UnitRecord

# Labels a view's code chooses, never the scope (one per client) or the key.
keys = Counter(
    "once_keys",
    "Keyed requests by what was decided: claimed, replayed, conflict, "
    "mismatch, failed (with why it was not kept as the reason), refused "
    "(with the problem type as the reason), or released (a stuck key, by an "
    "operator).",
    ["operation", "mode", "outcome", "reason"],
)


def _counting(outcome):
    # Only key_failed has a reason: one of signals.FAILURES.
    def receiver(sender, *, operation, mode, reason="", **kwargs):
        keys.labels(operation, mode, outcome, reason).inc()

    return receiver


def on_refused(sender, *, operation, mode, problem, **kwargs):
    # The problem type is one of the keys' fixed few (idempotency.exceptions).
    keys.labels(operation, mode, "refused", problem).inc()


def on_released(sender, *, released, **kwargs):
    # A record does not keep the mode it ran in: "" (as for an early refusal).
    for key in released:
        keys.labels(key["operation"], "", "released", "").inc()


RECEIVERS = [
    (signals.key_claimed, _counting("claimed")),
    (signals.key_replayed, _counting("replayed")),
    (signals.key_conflict, _counting("conflict")),
    (signals.key_mismatch, _counting("mismatch")),
    (signals.key_failed, _counting("failed")),
    (signals.key_refused, on_refused),
    (signals.keys_released, on_released),
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
    yield GaugeMetricFamily(
        "once_units_stuck",
        "Units of work mid-steps (running or compensating) whose lease ran "
        "out (their worker died or hangs), or whose compensation stopped at an "
        "undo that raised (counted up to 10001).",
        value=count_up_to(stuck(UnitRecord.objects, now)),
    )
