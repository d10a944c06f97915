"""Relay throughput by batch size on Redis and RabbitMQ against a bare publish
loop on the same broker, and the end-to-end lag at a steady rate."""

import multiprocessing
import os
import statistics
import time

import environ
from django.conf import settings
from django.db import connections, transaction
from kombu import Connection, Exchange, Queue

from . import database
from .charts import bar_chart
from .stats import percentile_ms, table

BROKERS = {
    "Redis": os.environ.get("BENCH_RELAY_REDIS_URL", "redis://127.0.0.1:6379/12"),
    "RabbitMQ": os.environ.get(
        "BENCH_RELAY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//"
    ),
}
DATABASE_URL = os.environ.get(
    "BENCH_RELAY_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/once_bench_relay"
)
ALIAS = "relay_bench"
BACKLOG = int(os.environ.get("BENCH_RELAY_BACKLOG", 20_000))
BATCH_SIZES = (10, 100, 500, 1000)
TWO_PROCESS_BATCH = 500
# Each figure is the median of this many runs; the spread is min-max.
ROUNDS = int(os.environ.get("BENCH_RELAY_ROUNDS", 3))
LAG_RATE = 1_000  # events per second
LAG_SECONDS = 10
# How long the lag bench's relay waits before it looks again when idle.
IDLE_POLL = 0.002
EXCHANGE = Exchange("relay-bench", type="topic", durable=True)
QUEUE = Queue("relay-bench", EXCHANGE, routing_key="order")
CHART = "docs/bench-relay.svg"


def run() -> str:
    _use_bench_database()
    figures = {}
    for broker, url in BROKERS.items():
        runs = [("bare", _bare_loop, (url,))]
        runs += [(size, _relay, (url, size, 1)) for size in BATCH_SIZES]
        runs.append(("two", _relay, (url, TWO_PROCESS_BATCH, 2)))
        if broker == "Redis":
            # What routing a batch on one read of the bindings buys (RabbitMQ
            # routes in the broker: nothing to read).
            runs.append(("lookups", _relay, (url, TWO_PROCESS_BATCH, 1, True)))
        rates = {name: [] for name, _, _ in runs}
        # Rounds interleave the runs, so a slow moment of the machine spreads
        # over all of them instead of sinking one.
        for _ in range(ROUNDS):
            for name, measure, args in runs:
                rates[name].append(measure(*args))
        figures[broker] = rates
    lags = {broker: _lag(url) for broker, url in BROKERS.items()}
    return _report(figures, lags)


def _use_bench_database():
    # An alias of our own, so the bench never touches the default database.
    config = environ.Env.db_url_config(DATABASE_URL)
    configured = connections.configure_settings({"default": config})["default"]
    connections.settings[ALIAS] = settings.DATABASES[ALIAS] = configured
    database.prepare(ALIAS)


def _purge_queue(url):
    with Connection(url) as conn:
        bound = QUEUE(conn.channel())
        bound.declare()
        bound.purge()


def _queued(url) -> int:
    with Connection(url) as conn:
        return QUEUE(conn.channel()).queue_declare(passive=True).message_count


def _messages(count, **payload):
    from django.utils import timezone

    from outbox.models import OutboxMessage

    now = timezone.now()
    messages = []
    for i in range(count):
        message = OutboxMessage(
            aggregatetype="order",
            aggregateid=str(i),
            type="order.created",
            payload={"order": i, "sku": "BOOK-1", "quantity": 1, **payload},
            created_at=now,
            available_at=now,
        )
        message.headers = {"once-message-id": str(message.id)}
        messages.append(message)
    return messages


def _bare_loop(url) -> float:
    """One publish call per message, as a service without the outbox would:
    on RabbitMQ each waits for its confirm (mandatory, like the relay's)."""
    from outbox.publishers import envelope

    _purge_queue(url)
    messages = _messages(BACKLOG)
    options = {"confirm_publish": True} if url.startswith("amqp") else {}
    with Connection(url, transport_options=options) as conn:
        producer = conn.Producer(serializer="json")
        started = time.perf_counter()
        for message in messages:
            body, headers = envelope(message)
            producer.publish(
                body,
                exchange=EXCHANGE,
                routing_key=message.aggregatetype,
                message_id=str(message.id),
                headers=headers,
                delivery_mode=2,
                mandatory=True,
                retry=False,
            )
        elapsed = time.perf_counter() - started
    assert _queued(url) == BACKLOG
    _purge_queue(url)
    return BACKLOG / elapsed


def _relay(url, batch_size, processes, lookups=False) -> float:
    """Drain a backlog with ``processes`` relays; messages per second from
    the first relay's start to the last one's end. ``lookups``: kombu reads
    the bindings for every message, as it does unless the publisher pins
    them."""
    from outbox.models import OutboxMessage

    _purge_queue(url)
    manager = OutboxMessage.objects.using(ALIAS)
    manager.all().delete()
    manager.bulk_create(_messages(BACKLOG), batch_size=2000)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("VACUUM ANALYZE outbox_message")
    # Children open their own connections; none may share the parent's socket.
    connections.close_all()
    context = multiprocessing.get_context("fork")
    spans = context.Queue()
    workers = [
        context.Process(target=_drain, args=(url, batch_size, spans, lookups))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    times = [spans.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    elapsed = max(end for _, end in times) - min(start for start, _ in times)
    published = manager.published().count()
    assert published == BACKLOG, f"only {published} of {BACKLOG} published"
    assert _queued(url) == BACKLOG
    _purge_queue(url)
    return BACKLOG / elapsed


def _publisher(url, lookups=False):
    import contextlib

    from outbox.publishers import KombuPublisher

    class BindingsPerMessage(KombuPublisher):
        def _routing_on(self, channel, table):
            return contextlib.nullcontext()  # kombu's own lookups

    publisher = BindingsPerMessage if lookups else KombuPublisher
    return publisher(url=url, exchange=EXCHANGE.name, declare=(QUEUE,))


def _drain(url, batch_size, spans, lookups=False):
    from outbox import relay

    started = time.time()
    relay.drain(
        batch_size=batch_size,
        time_budget=3600,
        publisher=_publisher(url, lookups),
        using=ALIAS,
    )
    spans.put((started, time.time()))
    connections.close_all()


def _lag(url) -> list[int]:
    """Record LAG_RATE events a second for LAG_SECONDS, each committed as it
    falls due; a relay loop publishes them and a consumer reads them. Return
    the lags in nanoseconds, commit to receipt."""
    from outbox.models import OutboxMessage

    _purge_queue(url)
    OutboxMessage.objects.using(ALIAS).all().delete()
    connections.close_all()
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    received = context.Queue()
    relay = context.Process(target=_relay_loop, args=(url, stop))
    consumer = context.Process(target=_consume, args=(url, received))
    relay.start()
    consumer.start()
    try:
        committed = _produce()
        arrivals = received.get(timeout=60)
    finally:
        stop.set()
        relay.join(10)
        consumer.join(10)
    _purge_queue(url)
    return [at - committed[n] for n, at in arrivals]


def _produce() -> list[int]:
    """Record the events on schedule; return when each one committed."""
    from django.test.utils import override_settings

    from outbox.api import record

    count = LAG_RATE * LAG_SECONDS
    committed: list[int] = []
    started = time.perf_counter()
    # No kick: the bench's relay loop stands in for the kicked task.
    with override_settings(OUTBOX={"KICK_ON_COMMIT": False}):
        while len(committed) < count:
            due = min(count, int((time.perf_counter() - started) * LAG_RATE) + 1)
            if due <= len(committed):
                time.sleep(0.0002)
                continue
            # Every event that fell due since the last commit commits now.
            with transaction.atomic(using=ALIAS):
                for n in range(len(committed), due):
                    record("order", n, "order.created", {"n": n}, using=ALIAS)
            committed += [time.time_ns()] * (due - len(committed))
    connections.close_all()
    return committed


def _relay_loop(url, stop):
    from outbox import relay

    with _publisher(url) as publisher:
        while not stop.is_set():
            batch = relay.claim(500, using=ALIAS)
            if batch:
                relay.publish_batch(batch, publisher, using=ALIAS)
            else:
                time.sleep(IDLE_POLL)
    connections.close_all()


def _consume(url, received_at):
    received = []
    count = LAG_RATE * LAG_SECONDS
    with Connection(url) as conn:
        simple = conn.SimpleQueue(QUEUE, no_ack=True)
        for _ in range(count):
            message = simple.get(timeout=30)
            received.append((message.payload["n"], time.time_ns()))
        simple.close()
    received_at.put(received)


def _report(figures, lags) -> str:
    def spread(values):
        median = statistics.median(values)
        return f"{median:,.0f} ({min(values):,.0f}-{max(values):,.0f})"

    lines = [
        "## Outbox relay: pipelined, verified publish",
        "",
        f"A backlog of {BACKLOG:,} messages drained by the relay (claim, one "
        "pipelined verified publish per batch, one fenced write-back) from "
        "PostgreSQL database `once_bench_relay`, against a bare kombu loop "
        "publishing the same bodies and headers one call at a time to the "
        "same broker (RabbitMQ: `mandatory`, each publish waiting for its "
        f"confirm), no database. Median of {ROUNDS} interleaved rounds, "
        "min-max in brackets; ratios are of the medians.",
        "",
        f"![Relay throughput by batch size, Redis and RabbitMQ]"
        f"({os.path.basename(CHART)})",
        "",
    ]
    rows = []
    for broker, rates in figures.items():
        bare = statistics.median(rates["bare"])
        label = (
            "bare loop, confirm per message"
            if broker == "RabbitMQ"
            else ("bare loop, one publish per call")
        )
        rows.append((broker, label, spread(rates["bare"]), "1.00x"))
        for size in BATCH_SIZES:
            rate = statistics.median(rates[size])
            rows.append(
                (
                    broker,
                    f"relay, 1 process, batch {size}",
                    spread(rates[size]),
                    f"{rate / bare:.2f}x",
                )
            )
        two = statistics.median(rates["two"])
        rows.append(
            (
                broker,
                f"relay, 2 processes, batch {TWO_PROCESS_BATCH}",
                spread(rates["two"]),
                f"{two / bare:.2f}x",
            )
        )
    lines += [
        table(("broker", "run", "messages/s", "vs bare loop"), rows),
        "",
    ]
    for broker, rates in figures.items():
        one = statistics.median(rates[TWO_PROCESS_BATCH])
        two = statistics.median(rates["two"])
        lines.append(
            f"{broker}: two relay processes vs one (batch {TWO_PROCESS_BATCH}): "
            f"{two / one:.2f}x."
        )
        if "lookups" in rates:
            lookups = statistics.median(rates["lookups"])
            lines.append(
                f"{broker}: each batch routed on one read of the bindings vs "
                f"kombu reading them per message (batch {TWO_PROCESS_BATCH}): "
                f"{one:,.0f} vs {lookups:,.0f} messages/s, {one / lookups:.2f}x."
            )
    lines += [
        "",
        f"End-to-end lag at a steady {LAG_RATE:,} events/s for {LAG_SECONDS} s: "
        "each event committed in its own transaction as it falls due, one "
        f"relay process (batch 500, looking again every {IDLE_POLL * 1000:.0f} "
        "ms when idle; in production the coalesced kick wakes it), a consumer "
        "reading the queue; lag is commit to receipt.",
        "",
        table(
            ("broker", "events", "p50 ms", "p99 ms", "max ms"),
            [
                (
                    broker,
                    f"{len(samples):,}",
                    f"{percentile_ms(samples, 0.50):.1f}",
                    f"{percentile_ms(samples, 0.99):.1f}",
                    f"{max(samples) / 1e6:.1f}",
                )
                for broker, samples in lags.items()
            ],
        ),
        "",
    ]
    _chart(figures)
    return "\n".join(lines)


def _chart(figures):
    categories = ["bare loop", *(f"batch {size}" for size in BATCH_SIZES)]
    categories.append(f"2 relays, batch {TWO_PROCESS_BATCH}")
    keys = ["bare", *BATCH_SIZES, "two"]
    series = [
        (broker, [statistics.median(rates[key]) for key in keys])
        for broker, rates in figures.items()
    ]
    bar_chart(
        CHART,
        f"Outbox relay throughput by batch size ({BACKLOG:,}-message backlog)",
        categories,
        series,
        "messages/s",
    )
