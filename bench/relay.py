"""Relay throughput by batch size on Redis and RabbitMQ against a bare publish
loop on the same broker, and the end-to-end lag at a steady rate."""

import dataclasses
import multiprocessing
import os
import statistics
import time

import environ
from django.conf import settings
from django.db import connections, transaction
from kombu import Connection, Exchange, Queue

from . import database, processes
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
# Targets: one relay process (each batch size from 500 up) vs the bare loop on
# RabbitMQ, and two relay processes vs one on both brokers.
ONE_VS_BARE_TARGET = 4.0
TWO_VS_ONE_TARGET = 1.8
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
    figures, drains = {}, {}
    for broker, url in BROKERS.items():
        runs = [("bare", _bare_loop, (url,))]
        runs += [(size, _relay, (url, size, 1)) for size in BATCH_SIZES]
        runs.append(("two", _relay, (url, TWO_PROCESS_BATCH, 2)))
        if broker == "Redis":
            # What routing a batch on one read of the bindings buys (RabbitMQ
            # routes in the broker: nothing to read).
            runs.append(("lookups", _relay, (url, TWO_PROCESS_BATCH, 1, "lookups")))
        else:
            # What two relays sharing one queue (one queue process) costs.
            runs.append(("queues", _relay, (url, TWO_PROCESS_BATCH, 2, "queues")))
        rates = {name: [] for name, _, _ in runs}
        drains[broker] = {name: [] for name, _, _ in runs}
        # Rounds interleave the runs, so a slow moment of the machine spreads
        # over all of them instead of sinking one.
        for _ in range(ROUNDS):
            for name, measure, args in runs:
                result = measure(*args)
                rates[name].append(float(result))
                if isinstance(result, Drained):
                    drains[broker][name].append(result)
        figures[broker] = rates
    lags = {broker: _lag(url) for broker, url in BROKERS.items()}
    return _report(figures, drains, lags)


def _use_bench_database():
    # An alias of our own, so the bench never touches the default database.
    config = environ.Env.db_url_config(DATABASE_URL)
    configured = connections.configure_settings({"default": config})["default"]
    connections.settings[ALIAS] = settings.DATABASES[ALIAS] = configured
    database.prepare(ALIAS)


def _purge_queue(url, queue=QUEUE):
    with Connection(url) as conn:
        bound = queue(conn.channel())
        bound.declare()
        bound.purge()


def _queued(url, queue=QUEUE) -> int:
    with Connection(url) as conn:
        return queue(conn.channel()).queue_declare(passive=True).message_count


def _queue_of(n: int) -> Queue:
    """Relay process ``n``'s own queue, bound to an exchange of its own."""
    exchange = Exchange(f"{EXCHANGE.name}-{n}", type="topic", durable=True)
    return Queue(exchange.name, exchange, routing_key="order")


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


def _relay(url, batch_size, processes, variant=None) -> float:
    """Drain a backlog with ``processes`` relays; messages per second from
    the first relay's start to the last one's end. ``variant``: the
    publisher as it would be without one of its savings (``_publisher()``),
    or "queues": each process publishes to a queue of its own."""
    from outbox.models import OutboxMessage

    if variant == "queues":
        queues = [_queue_of(n) for n in range(processes)]
    else:
        queues = [QUEUE] * processes
    for queue in queues:
        _purge_queue(url, queue)
    manager = OutboxMessage.objects.using(ALIAS)
    manager.all().delete()
    manager.bulk_create(_messages(BACKLOG), batch_size=2000)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("VACUUM ANALYZE outbox_message")
    # Children open their own connections; none may share the parent's socket.
    connections.close_all()
    context = multiprocessing.get_context("fork")
    reports = context.Queue()
    workers = [
        context.Process(target=_drain, args=(url, batch_size, reports, variant, queue))
        for queue in queues
    ]
    before = _server_cpu()
    for worker in workers:
        worker.start()
    spans = [reports.get(timeout=600) for _ in workers]
    servers = {name: used - before[name] for name, used in _server_cpu().items()}
    for worker in workers:
        worker.join()
    elapsed = max(span["end"] for span in spans) - min(span["start"] for span in spans)
    published = manager.published().count()
    assert published == BACKLOG, f"only {published} of {BACKLOG} published"
    distinct = {queue.name: queue for queue in queues}.values()
    assert sum(_queued(url, queue) for queue in distinct) == BACKLOG
    for queue in distinct:
        _purge_queue(url, queue)
        if queue is not QUEUE:
            with Connection(url) as conn:
                queue(conn.channel()).delete()
                queue.exchange(conn.channel()).delete()
    return Drained(BACKLOG / elapsed, elapsed, spans, servers)


@dataclasses.dataclass
class Drained:
    """One drain: its rate, and where each relay's time and the servers' CPU
    went (what two relays contend on)."""

    rate: float
    elapsed: float
    spans: list  # per relay process: start, end, cpu, claim, publish, write_back
    servers: dict  # CPU seconds the broker and PostgreSQL used meanwhile

    def __float__(self):
        return self.rate


SERVERS = {"broker": ("beam.smp", "redis-server"), "PostgreSQL": ("postgres",)}


def _server_cpu() -> dict:
    """CPU seconds used so far by the broker's and PostgreSQL's processes
    (other users of those servers count too: the machine is shared), their
    exited children's included: the drains' backends exit with them."""
    named = {server: _named(names) for server, names in SERVERS.items()}
    return processes.cpu_seconds(named, reaped=True)


def _named(names):
    return lambda process: process.name in names


def _publisher(url, variant=None, queue=QUEUE):
    """The bench's publisher; ``variant`` "lookups": kombu reads the bindings
    for every message, as it does unless the publisher pins them."""
    import contextlib

    from outbox.publishers import KombuPublisher

    class BindingsPerMessage(KombuPublisher):
        def _routing_on(self, channel, table):
            return contextlib.nullcontext()  # kombu's own lookups

    publisher = BindingsPerMessage if variant == "lookups" else KombuPublisher
    return publisher(url=url, exchange=queue.exchange.name, declare=(queue,))


def _drain(url, batch_size, spans, variant=None, queue=QUEUE):
    from outbox import relay

    span = {"claim": 0.0, "write_back": 0.0, "publish": 0.0}

    def timed(execute, sql, params, many, context):
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            # The claim is one CTE statement, the write-back one UPDATE.
            phase = "claim" if sql.startswith("WITH picked") else "write_back"
            span[phase] += time.perf_counter() - began

    publisher = _publisher(url, variant, queue)
    publish_many = publisher.publish_many

    def timed_publish(messages):
        began = time.perf_counter()
        try:
            return publish_many(messages)
        finally:
            span["publish"] += time.perf_counter() - began

    publisher.publish_many = timed_publish
    started, scheduled = time.time(), _scheduled()
    with connections[ALIAS].execute_wrapper(timed):
        relay.drain(
            batch_size=batch_size,
            time_budget=3600,
            publisher=publisher,
            using=ALIAS,
        )
    (ran, waited), (ran_before, waited_before) = _scheduled(), scheduled
    span.update(
        start=started,
        end=time.time(),
        cpu=ran - ran_before,
        runnable=waited - waited_before,
    )
    spans.put(span)
    connections.close_all()


def _scheduled() -> tuple[float, float]:
    """Seconds this process has run on a core, and waited runnable for one
    (Linux schedstat): the second is the time a busy machine took from it."""
    with open("/proc/self/schedstat") as stat:
        ran, waited = stat.read().split()[:2]
    return int(ran) / 1e9, int(waited) / 1e9


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


def _met(ratio, target) -> str:
    return f">= {target}x: {'met' if ratio >= target else 'missed'}"


def _report(figures, drains, lags) -> str:
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
        "min-max in brackets; ratios are of the medians. On RabbitMQ a batch "
        "is sent in a few socket writes of 64 KiB, then its confirms are "
        "awaited together.",
        f"Targets: on RabbitMQ one relay process >= {ONE_VS_BARE_TARGET}x the "
        f"bare loop (batches of 500 and up); two relay processes >= "
        f"{TWO_VS_ONE_TARGET}x one (batch {TWO_PROCESS_BATCH}) on both brokers.",
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
        rows.append((broker, label, spread(rates["bare"]), "1.00x", ""))
        for size in BATCH_SIZES:
            ratio = statistics.median(rates[size]) / bare
            target = (
                _met(ratio, ONE_VS_BARE_TARGET)
                if broker == "RabbitMQ" and size >= 500
                else ""
            )
            rows.append(
                (
                    broker,
                    f"relay, 1 process, batch {size}",
                    spread(rates[size]),
                    f"{ratio:.2f}x",
                    target,
                )
            )
        two = statistics.median(rates["two"])
        rows.append(
            (
                broker,
                f"relay, 2 processes, batch {TWO_PROCESS_BATCH}",
                spread(rates["two"]),
                f"{two / bare:.2f}x",
                "",
            )
        )
    lines += [
        table(("broker", "run", "messages/s", "vs bare loop", "target"), rows),
        "",
    ]
    for broker, rates in figures.items():
        one = statistics.median(rates[TWO_PROCESS_BATCH])
        two = statistics.median(rates["two"])
        lines.append(
            f"{broker}: two relay processes vs one (batch {TWO_PROCESS_BATCH}): "
            f"{two / one:.2f}x ({_met(two / one, TWO_VS_ONE_TARGET)})."
        )
        if "lookups" in rates:
            lookups = statistics.median(rates["lookups"])
            lines.append(_versus(broker, "lookups", one, lookups))
        if "queues" in rates:
            queues = statistics.median(rates["queues"])
            more = (
                f" ({queues / one:.2f}x one process). A RabbitMQ queue is one "
                "Erlang process: it takes, stores and confirms its messages one "
                "at a time"
            )
            lines.append(_versus(broker, "queues", queues, two, more))
    lines += ["", *_contention(drains)]
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


# What each comparison run measures: the first rate against the second.
VERSUS = {
    "lookups": "each batch routed on one read of the bindings vs kombu reading "
    "them per message",
    "queues": "two relay processes publishing to a queue each vs both to one queue",
}


def _versus(broker, run, ours, theirs, more="") -> str:
    return (
        f"{broker}: {VERSUS[run]} (batch {TWO_PROCESS_BATCH}): {ours:,.0f} vs "
        f"{theirs:,.0f} messages/s, {ours / theirs:.2f}x{more}."
    )


def _contention(drains) -> list[str]:
    """Where one and two relay processes spend their time, per process, and
    the CPU the servers used meanwhile: what two relays wait on."""
    rows, per_message = [], []
    for broker, runs in drains.items():
        medians = {}
        for name, label in ((TWO_PROCESS_BATCH, "1 process"), ("two", "2 processes")):
            # The median round by rate, so the row is one consistent run.
            run = medians[name] = sorted(runs[name], key=lambda drained: drained.rate)[
                len(runs[name]) // 2
            ]
            per = len(run.spans)

            def share(key, run=run, per=per):
                seconds = sum(span[key] for span in run.spans) / per
                return f"{seconds / run.elapsed:.0%}"

            rows.append(
                (
                    broker,
                    label,
                    f"{run.elapsed:.2f}",
                    share("claim"),
                    share("publish"),
                    share("write_back"),
                    share("cpu"),
                    share("runnable"),
                    f"{run.servers['broker']:.2f}",
                    f"{run.servers['PostgreSQL']:.2f}",
                )
            )
        per_message.append(
            _per_message(broker, medians[TWO_PROCESS_BATCH], medians["two"])
        )
    return [
        f"Where the time goes (batch {TWO_PROCESS_BATCH}, the median round): "
        "each relay process's wall time in the claim, the publish (send and "
        "confirms) and the write-back, the time it ran on a core and the time it "
        "was ready to run but waited for one (Linux schedstat), as shares of "
        "the drain's wall time (averaged over the processes); then the CPU seconds "
        "the broker's and PostgreSQL's processes used during the drain (other "
        "work on the shared machine included).",
        "",
        table(
            (
                "broker",
                "relays",
                "wall s",
                "claim",
                "publish",
                "write-back",
                "relay on a core",
                "relay waiting for a core",
                "broker CPU s",
                "PostgreSQL CPU s",
            ),
            rows,
        ),
        "",
        "The same runs per message (the processes' time in each phase over the "
        f"{BACKLOG:,} messages), one process, then two:",
        "",
        *per_message,
    ]


def _per_message(broker, one, two) -> str:
    def micros(run, key):
        return sum(span[key] for span in run.spans) / BACKLOG * 1e6

    phases = ", ".join(
        f"{label} {micros(one, key):.0f} → {micros(two, key):.0f} µs"
        for key, label in (
            ("claim", "claim"),
            ("publish", "publish"),
            ("write_back", "write-back"),
            ("cpu", "on a core"),
            ("runnable", "waiting for a core"),
        )
    )
    return f"- {broker}: {phases}."


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
