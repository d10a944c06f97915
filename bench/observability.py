"""What signals, metrics and tracing cost when they are on, and when off.

Measured in one run, side by side: the keyed first request (atomic,
in-process, the cached user, as ``bench.idempotency`` sends it) in each
mode, the modes interleaved in rounds; and one relay process draining a
batch of pending messages to Redis (``bench.relay``'s drain), off against
everything on, the two alternating.

Off is the default: no receiver connected, ``IDEMPOTENCY["METRICS"]`` off,
no tracer provider (the ``opentelemetry-api`` package is installed, so the
no-op tracer answers). Tracing on is how its tests turn it on
(``tests/tracing``): ``idempotency.shared.tracing.tracer`` taken from an SDK
``TracerProvider`` whose ``SimpleSpanProcessor`` exports into memory,
cleared after each round. A keyed request only annotates the server span
an instrumented project starts, so with tracing on the bench starts that
span around each request; its own cost is the "server span only" mode
(the SDK span with the library's tracing switched off), the base the
library's tracing cost is measured from.
"""

import contextlib
import multiprocessing
import statistics
import time
from collections.abc import Callable, Iterator

from django.conf import settings
from django.db import connections
from django.dispatch import Signal
from django.test import Client, override_settings
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind

import idempotency.shared.signals
import idempotency.signals
import inbox.signals
import outbox.signals
import webhooks.signals
from idempotency.shared import tracing

from . import cached_auth, database, relay
from .idempotency import FIRSTS, KEYED, _bench_user, _in_process, _key
from .stats import median_ms, p95_ms, table

ROUNDS = 60
PER_ROUND = 12
WARMUP = 20  # requests per mode
TARGET = 1.05  # on vs off: at most 5% more

OFF = "off (the default)"
SIGNALS = "a no-op receiver on every signal"
METRICS = "METRICS on"
SPAN_ONLY = "server span only (library tracing off)"
TRACING = "tracing on (SDK, in-memory export)"
ALL = "all on"
# Each mode's base: what it is measured against.
BASES = {SIGNALS: OFF, METRICS: OFF, TRACING: SPAN_ONLY, ALL: SPAN_ONLY}

RELAY_ROUNDS = 9
RELAY_BACKLOG = 3000
RELAY_BATCH = 500
# A valid W3C context, as record() stores under a traced request: the relay's
# send span links each message's.
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

SIGNAL_MODULES = (
    idempotency.signals,
    idempotency.shared.signals,
    outbox.signals,
    inbox.signals,
    webhooks.signals,
)
UID = "bench-observability-noop"


def run() -> str:
    database.prepare()
    user = _bench_user()
    send = _in_process(Client(), cached_auth.header(user.username))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sdk_tracer = provider.get_tracer("bench")
    modes = _modes(sdk_tracer)
    began = time.monotonic()
    keyed = _keyed(send, modes, sdk_tracer, exporter)
    keyed_seconds = time.monotonic() - began
    began = time.monotonic()
    drained = _relay_rates(modes, exporter)
    relay_seconds = time.monotonic() - began
    signals_count = len(_signals())
    return (
        "## Observability: signals, metrics and tracing, off and on\n\n"
        f"The keyed first request (atomic, in-process, the cached user) in "
        f"each mode, {ROUNDS} interleaved rounds of {PER_ROUND} per mode "
        f"({keyed_seconds:.0f} s). Off is the default (nothing connected, "
        "metrics off, no tracer provider: the API's no-op tracer). Signals: "
        f"one no-op receiver on each of the {signals_count} signals. Metrics: "
        '`IDEMPOTENCY["METRICS"]` on, prometheus-client\'s single-process '
        "registry. Tracing: `idempotency.shared.tracing.tracer` from an SDK "
        "`TracerProvider` exporting into memory (cleared each round), inside "
        "a server span the bench starts around each request, as an "
        "instrumented project does; the span alone is its own mode and the "
        f"base of tracing's cost. Target: on <= {TARGET}x its base.\n\n"
        + _table(keyed, base_of=lambda name: BASES.get(name, OFF))
        + f"\n\nThe relay: one process draining {RELAY_BACKLOG} pending "
        f"messages (each with a `traceparent`) to Redis in batches of "
        f"{RELAY_BATCH}, {RELAY_ROUNDS} rounds alternating off and all on "
        f"({relay_seconds:.0f} s); messages per second. Target: all on >= "
        f"{1 / TARGET:.3f}x off.\n\n"
        + _relay_table(drained)
        + "\n\nOff against the code before these features: the `Cached user` "
        "table's keyed, atomic row of the idempotency section is today's "
        "default path, the same as off here (no receiver: one attribute read "
        "per decision; tracing off: the API's no-op calls); the machine is "
        "shared, so figures of different runs are not compared.\n"
    )


def _signals() -> list[Signal]:
    return [
        value
        for module in SIGNAL_MODULES
        for value in vars(module).values()
        if isinstance(value, Signal)
    ]


def _noop(sender, **kwargs):
    pass


@contextlib.contextmanager
def _signals_on() -> Iterator[None]:
    signals = _signals()
    for signal in signals:
        signal.connect(_noop, dispatch_uid=UID)
    try:
        yield
    finally:
        for signal in signals:
            signal.disconnect(dispatch_uid=UID)


def _metrics_on():
    return override_settings(IDEMPOTENCY={**settings.IDEMPOTENCY, "METRICS": True})


@contextlib.contextmanager
def _tracing(sdk_tracer, *, library: bool) -> Iterator[None]:
    """The SDK tracer in the library's place; ``library`` False switches
    the library's spans and attributes off, as without the API."""
    tracer, enabled = tracing.tracer, tracing.ENABLED
    tracing.tracer, tracing.ENABLED = sdk_tracer, library
    try:
        yield
    finally:
        tracing.tracer, tracing.ENABLED = tracer, enabled


def _modes(sdk_tracer) -> dict[str, tuple[Callable, bool]]:
    """Each mode: what turns it on (a context manager) and whether requests
    run inside a server span."""

    def all_on():
        stack = contextlib.ExitStack()
        stack.enter_context(_signals_on())
        stack.enter_context(_metrics_on())
        stack.enter_context(_tracing(sdk_tracer, library=True))
        return stack

    return {
        OFF: (contextlib.nullcontext, False),
        SIGNALS: (_signals_on, False),
        METRICS: (_metrics_on, False),
        SPAN_ONLY: (lambda: _tracing(sdk_tracer, library=False), True),
        TRACING: (lambda: _tracing(sdk_tracer, library=True), True),
        ALL: (all_on, True),
    }


def _keyed(send, modes, sdk_tracer, exporter) -> dict[str, list[int]]:
    path = FIRSTS[KEYED]

    def request(in_span):
        if not in_span:
            return send(path, _key())
        with sdk_tracer.start_as_current_span(f"POST {path}", kind=SpanKind.SERVER):
            return send(path, _key())

    for turned_on, in_span in modes.values():
        with turned_on():
            for _ in range(WARMUP):
                request(in_span)
    samples: dict[str, list[int]] = {name: [] for name in modes}
    order = list(modes.items())
    for number in range(ROUNDS):
        # Reversed every other round: no mode always follows the same one.
        for name, (turned_on, in_span) in order if number % 2 else order[::-1]:
            with turned_on():
                samples[name] += [request(in_span) for _ in range(PER_ROUND)]
            exporter.clear()
    return samples


def _relay_rates(modes, exporter) -> dict[str, list[float]]:
    relay._use_bench_database()
    url = relay.BROKERS["Redis"]
    rates: dict[str, list[float]] = {OFF: [], ALL: []}
    for number in range(RELAY_ROUNDS):
        names = [OFF, ALL] if number % 2 else [ALL, OFF]
        for name in names:
            turned_on, _in_span = modes[name]
            # The forked relay inherits the mode: receivers, settings, tracer.
            with turned_on():
                rates[name].append(_drain(url))
            exporter.clear()
    return rates


def _drain(url) -> float:
    """One relay process drains RELAY_BACKLOG messages: messages per second."""
    from outbox.models import OutboxMessage

    relay._purge_queue(url)
    manager = OutboxMessage.objects.using(relay.ALIAS)
    manager.all().delete()
    messages = relay._messages(RELAY_BACKLOG)
    for message in messages:
        message.headers["traceparent"] = TRACEPARENT
    manager.bulk_create(messages, batch_size=2000)
    with connections[relay.ALIAS].cursor() as cursor:
        cursor.execute("VACUUM ANALYZE outbox_message")
    connections.close_all()
    context = multiprocessing.get_context("fork")
    reports = context.Queue()
    worker = context.Process(target=relay._drain, args=(url, RELAY_BATCH, reports))
    worker.start()
    span = reports.get(timeout=600)
    worker.join()
    published = manager.published().count()
    assert published == RELAY_BACKLOG, f"only {published} of {RELAY_BACKLOG}"
    relay._purge_queue(url)
    return RELAY_BACKLOG / (span["end"] - span["start"])


def _verdict(ratio: float, target: float, *, at_least=False) -> str:
    met = ratio >= target if at_least else ratio <= target
    sign = ">=" if at_least else "<="
    return f"{sign} {target:.3f}x: {'met' if met else 'missed'}"


def _table(samples, *, base_of) -> str:
    def row(name, values):
        base = base_of(name)
        ratio = median_ms(values) / median_ms(samples[base])
        versus = "" if name == base else f"{ratio:.3f}x {base}"
        verdict = _verdict(ratio, TARGET) if name in BASES else ""
        return (
            name,
            f"{median_ms(values):.3f}",
            f"{p95_ms(values):.3f}",
            versus,
            verdict,
        )

    rows = [row(name, values) for name, values in samples.items()]
    return table(("mode", "median ms", "p95 ms", "vs", "target"), rows)


def _relay_table(rates) -> str:
    off = statistics.median(rates[OFF])

    def row(name, values):
        ratio = statistics.median(values) / off
        spread = f"{min(values):,.0f}-{max(values):,.0f}"
        verdict = _verdict(ratio, 1 / TARGET, at_least=True) if name != OFF else ""
        return (
            name,
            f"{statistics.median(values):,.0f} ({spread})",
            f"{ratio:.3f}x",
            verdict,
        )

    rows = [row(name, values) for name, values in rates.items()]
    return table(("relay", "messages/s, median (min-max)", "vs off", "target"), rows)
