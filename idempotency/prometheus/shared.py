"""Counters of what the four apps share: durable steps, compensations, units
released by an operator and the retention purge (the signals of
``idempotency.shared.signals``)."""

from prometheus_client import Counter

from ..shared import signals, stepnames

steps = Counter(
    "once_steps",
    "Durable steps whose recovery point committed, by unit kind and step.",
    ["kind", "step", "undo"],
)
compensations = Counter(
    "once_units_compensated",
    "Units that gave up and undid their completed steps, by kind.",
    ["kind"],
)
releases = Counter(
    "once_units_released",
    "Stuck units an operator released from the console, by kind.",
    ["kind"],
)
purged = Counter(
    "once_purged_rows", "Rows the retention purge deleted, by kind.", ["kind"]
)


def on_step_done(sender, *, kind, step, undo=False, **kwargs):
    steps.labels(kind, stepnames.family(step), "true" if undo else "false").inc()


def on_unit_compensated(sender, *, kind, **kwargs):
    compensations.labels(kind).inc()


def on_units_released(sender, *, units, **kwargs):
    for released in units:
        releases.labels(released["kind"]).inc()


def on_purged(sender, *, kind, rows, **kwargs):
    purged.labels(kind).inc(rows)


RECEIVERS = [
    (signals.step_done, on_step_done),
    (signals.unit_compensated, on_unit_compensated),
    (signals.units_released, on_units_released),
    (signals.purged, on_purged),
]
