"""Growth curves: the keyed request's overhead as the record table grows (with
the retention purge running beside it), and the relay's throughput as its
backlog grows.

Both tables are filled server-side by one ``INSERT ... SELECT ... FROM
generate_series``; past BULK rows the secondary indexes are set aside and
rebuilt by sorting: a million keys took 12 s that way against 40 s inserted into
the indexes row by row, on the bench's machine.
"""

import multiprocessing
import os
import time
from contextlib import contextmanager

from django.db import connection, connections
from kombu import Connection, Exchange, Queue

from idempotency.models import IdempotencyRecord
from idempotency.shared import retention
from outbox.models import OutboxMessage

from . import database
from .charts import bar_chart
from .idempotency import BARE, FIRSTS, KEYED, _bench_user, _in_process, _key
from .relay import ALIAS, BROKERS, _use_bench_database
from .stats import median_ms, p95_ms, table


def _sizes(name, default):
    """Sizes from ``BENCH_GROWTH_<name>`` (comma-separated), for a quick run."""
    value = os.environ.get(f"BENCH_GROWTH_{name}")
    return tuple(int(size) for size in value.split(",")) if value else default


KEY_COUNTS = _sizes("KEYS", (10**4, 10**6, 10**7))
BACKLOGS = _sizes("BACKLOGS", (10**3, 10**5, 10**6))
# A fill this large sets the indexes aside and rebuilds them afterwards.
BULK = 100_000
# The keys were made over the last two days with a one-day lifetime: about
# half have expired, so the purge has work at every size but the smallest.
KEY_SPREAD_HOURS = 48
KEY_LIFETIME_HOURS = 24
PURGE_BATCH = 1000
KINDS = (BARE, KEYED)
ROUNDS = 10
PER_ROUND = 50
WARMUP = 100
# The relay publishes at most this many messages of each backlog: its rate
# over the first SLICE, so a million-message backlog does not take minutes.
SLICE = 20_000
RELAY_BATCH = 500
EXCHANGE = Exchange("growth-bench", type="topic", durable=True)
QUEUE = Queue("growth-bench", EXCHANGE, routing_key="order")
KEYS_CHART = "docs/bench-growth-keys.svg"
RELAY_CHART = "docs/bench-growth-relay.svg"


@contextmanager
def indexes_set_aside(cursor, table_name):
    """Drop ``table_name``'s secondary indexes and unique constraints, and
    rebuild them from their own definitions on the way out, even after an
    error: a bulk INSERT then builds each index once, sorted, instead of
    inserting into it row by row at random pages."""
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s::regclass AND contype = 'u'",
        [table_name],
    )
    constraints = cursor.fetchall()
    cursor.execute(
        "SELECT indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = current_schema() AND tablename = %s AND indexname "
        "NOT IN (SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)",
        [table_name, table_name],
    )
    indexes = cursor.fetchall()
    for name, _ in indexes:
        cursor.execute(f'DROP INDEX "{name}"')
    for name, _ in constraints:
        cursor.execute(f'ALTER TABLE "{table_name}" DROP CONSTRAINT "{name}"')
    try:
        yield
    finally:
        # Room to sort ten million keys in memory rather than on disk.
        cursor.execute("SET maintenance_work_mem = '1GB'")
        for _, definition in indexes:
            cursor.execute(definition)
        for name, definition in constraints:
            cursor.execute(
                f'ALTER TABLE "{table_name}" ADD CONSTRAINT "{name}" {definition}'
            )
        cursor.execute("RESET maintenance_work_mem")


def _insert(using, table_name, sql, params, rows) -> dict[str, float]:
    """Run the fill, the indexes set aside for a bulk one; seconds per phase."""
    phases: dict[str, float] = {}
    if rows < 1:
        return phases
    started = time.perf_counter()
    bulk = indexes_set_aside if rows >= BULK else _nothing_set_aside
    with connections[using].cursor() as cursor:
        with bulk(cursor, table_name):
            cursor.execute(sql, params)
            inserted = time.perf_counter()
            phases["insert"] = inserted - started
        phases["indexes"] = time.perf_counter() - inserted
        cursor.execute(f'VACUUM ANALYZE "{table_name}"')
        phases["vacuum"] = time.perf_counter() - started - sum(phases.values())
        if rows >= BULK:
            # Gigabytes of dirty pages written out now, not during the
            # measurement, where every commit's fsync would queue behind them.
            cursor.execute("CHECKPOINT")
            phases["checkpoint"] = time.perf_counter() - started - sum(phases.values())
    return phases


@contextmanager
def _nothing_set_aside(cursor, table_name):
    yield


def fill_keys(first, last, using="default"):
    """Insert completed keys numbered ``first`` to ``last``: random UUID-shaped
    keys over 1,000 scopes, made over the last KEY_SPREAD_HOURS, each
    expiring KEY_LIFETIME_HOURS after it was made."""
    table_name = IdempotencyRecord._meta.db_table
    return _insert(
        using,
        table_name,
        f'INSERT INTO "{table_name}" (scope, operation, key, request_hash, '
        "state, status_code, response_body, response_headers, resource_type, "
        "resource_id, attempts, created_at, completed_at, expires_at) "
        "SELECT 'user:' || (n %% 1000), 'bench.growth', "
        "md5(n::text)::uuid::text, md5(n::text) || md5(n::text), "
        "'completed', 201, convert_to('{\"id\": ' || n || '}', 'UTF8'), "
        "'{\"Content-Type\": \"application/json\"}', '', '', 1, made, made, "
        "made + %s * interval '1 hour' "
        "FROM (SELECT n, now() - random() * %s * interval '1 hour' AS made "
        # Typed: with server-side binding two small ints match two overloads.
        "FROM generate_series(%s::bigint, %s::bigint) AS n) AS keys",
        [KEY_LIFETIME_HOURS, KEY_SPREAD_HOURS, first, last],
        last - first + 1,
    )


def fill_backlog(count, using):
    """Add ``count`` pending outbox messages, already due, oldest first."""
    table_name = OutboxMessage._meta.db_table
    return _insert(
        using,
        table_name,
        f'INSERT INTO "{table_name}" (id, aggregatetype, aggregateid, type, '
        "payload, headers, state, created_at, available_at, attempts, "
        "requeued_at_attempt, last_error, tracingspancontext) "
        "SELECT id, 'order', id::text, 'order.created', "
        "jsonb_build_object('order', n, 'sku', 'BOOK-1', 'quantity', 1), "
        "jsonb_build_object('once-message-id', id), 'pending', made, made, "
        "0, 0, '', '' FROM (SELECT n, gen_random_uuid() AS id, "
        "now() - (%s - n) * interval '1 millisecond' AS made "
        "FROM generate_series(1, %s) AS n) AS messages",
        [count, count],
        count,
    )


def run() -> str:
    began = time.perf_counter()
    keys = _keys()
    relays = _relays()
    took = time.perf_counter() - began
    _charts(keys, relays)
    return _report(keys, relays, took)


class _Stopped(Exception):
    pass


def _purge_while(running, paused, stop, results):
    """In its own process: purge expired keys until ``stop``, looking again
    shortly whenever none is left, as a frequent schedule would. Between
    batches it waits while ``running`` is clear, saying so on ``paused``.
    Sends back how many keys it deleted."""
    deleted = latest = 0

    def pause_point():
        if not running.is_set():
            paused.set()
            running.wait()
            paused.clear()

    def progress(kind, so_far):
        nonlocal latest
        latest = so_far
        pause_point()
        if stop.is_set():
            raise _Stopped

    try:
        while not stop.is_set():
            pause_point()
            latest = 0
            try:
                deleted += retention.purge(
                    only=["idempotency"], batch_size=PURGE_BATCH, progress=progress
                )["idempotency"]
            except _Stopped:
                deleted += latest
            else:
                if not latest:
                    time.sleep(0.1)
    finally:
        connections.close_all()
        results.put(deleted)


def _keys():
    """Per record count: samples (ns) of the bare and the keyed view, with
    the purge running and paused, and the fill's and purge's own figures."""
    database.prepare()
    send = _in_process(_logged_in())
    table_name = IdempotencyRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f'TRUNCATE "{table_name}"')
    figures = {}
    numbered = 0  # the last key number used: the purge leaves gaps
    try:
        for count in KEY_COUNTS:
            missing = count - IdempotencyRecord.objects.count()
            phases = fill_keys(numbered + 1, numbered + missing)
            numbered += missing
            rows = IdempotencyRecord.objects.count()
            samples, purged = _measured_beside_purge(send)
            figures[count] = {
                "rows": rows,
                "fill": phases,
                "samples": samples,
                "purged": purged,
            }
    finally:
        # The later parts must not find ten million rows.
        with connection.cursor() as cursor:
            cursor.execute(f'TRUNCATE "{table_name}"')
    return figures


def _logged_in():
    from django.test import Client

    client = Client()
    client.force_login(_bench_user())
    return client


def _measured_beside_purge(send):
    """Rounds of bare and keyed requests, the purge running in every other
    round and paused in the rest, so drift hits both. Samples (ns) by
    (purging, kind), and how many keys the purge deleted."""
    # The purge must not share this process's connection (or its GIL).
    connections.close_all()
    context = multiprocessing.get_context("fork")
    running, paused, stop = context.Event(), context.Event(), context.Event()
    results = context.Queue()
    purger = context.Process(target=_purge_while, args=(running, paused, stop, results))
    running.set()
    purger.start()
    samples = {(purging, kind): [] for purging in (True, False) for kind in KINDS}
    try:
        for _ in range(WARMUP):
            send(FIRSTS[BARE])
            send(FIRSTS[KEYED], _key())
        for number in range(ROUNDS):
            purging = number % 2 == 0
            if purging:
                running.set()
            else:
                running.clear()
                paused.wait(30)
            for _ in range(PER_ROUND):
                samples[purging, BARE].append(send(FIRSTS[BARE]))
                samples[purging, KEYED].append(send(FIRSTS[KEYED], _key()))
    finally:
        stop.set()
        running.set()
        purged = results.get(timeout=60)
        purger.join(30)
    return samples, purged


def _relays():
    """Per broker and backlog: messages/s over the first SLICE published."""
    _use_bench_database()
    manager = OutboxMessage.objects.using(ALIAS)
    rates = {broker: {} for broker in BROKERS}
    fills = {}
    try:
        manager.all().delete()
        for backlog in BACKLOGS:
            for broker, url in BROKERS.items():
                # Topped up: every broker meets the same backlog.
                phases = fill_backlog(backlog - manager.count(), ALIAS)
                fills.setdefault(backlog, phases)
                rates[broker][backlog] = _drain_slice(url, min(backlog, SLICE))
                manager.published().delete()
    finally:
        with connections[ALIAS].cursor() as cursor:
            cursor.execute(f'TRUNCATE "{OutboxMessage._meta.db_table}"')
    return {"rates": rates, "fills": fills}


def _drain_slice(url, count) -> float:
    """The relay's own claim and publish, batch after batch, until ``count``
    messages are published; their rate, from the first claim to the last
    write-back."""
    from outbox import relay
    from outbox.publishers import KombuPublisher

    _purge_queue(url)
    publisher = KombuPublisher(url=url, exchange=EXCHANGE.name, declare=(QUEUE,))
    published = 0
    with publisher:
        started = time.perf_counter()
        while published < count:
            batch = relay.claim(min(RELAY_BATCH, count - published), using=ALIAS)
            published += relay.publish_batch(batch, publisher, using=ALIAS).published
        elapsed = time.perf_counter() - started
    with Connection(url) as conn:
        queued = QUEUE(conn.channel()).queue_declare(passive=True).message_count
    assert queued == count, f"{queued} of {count} messages reached the queue"
    _purge_queue(url)
    return count / elapsed


def _purge_queue(url):
    with Connection(url) as conn:
        bound = QUEUE(conn.channel())
        bound.declare()
        bound.purge()


def _overhead_ms(samples, purging):
    return median_ms(samples[purging, KEYED]) - median_ms(samples[purging, BARE])


def _charts(keys, relays):
    bar_chart(
        KEYS_CHART,
        "Keyed request's overhead over the bare view, by records in the table",
        [f"{count:,} records" for count in keys],
        [
            (
                f"purge {'running' if purging else 'paused'}",
                [_overhead_ms(f["samples"], purging) for f in keys.values()],
            )
            for purging in (True, False)
        ],
        "ms (median keyed - median bare)",
    )
    bar_chart(
        RELAY_CHART,
        f"Relay throughput by backlog (first {SLICE:,} published, batch {RELAY_BATCH})",
        [f"{backlog:,} pending" for backlog in BACKLOGS],
        [
            (broker, [rates[backlog] for backlog in BACKLOGS])
            for broker, rates in relays["rates"].items()
        ],
        "messages/s",
    )


def _phases(phases):
    """A fill's time, split when it set the indexes aside."""
    total = f"{sum(phases.values()):.1f} s"
    if phases.get("indexes", 0) < 0.05:
        return total
    return f"{total}: " + ", ".join(
        f"{phase} {seconds:.1f}" for phase, seconds in phases.items()
    )


def _report(keys, relays, took) -> str:
    smallest = _overhead_ms(next(iter(keys.values()))["samples"], True)
    key_rows = []
    for count, figures in keys.items():
        samples = figures["samples"]
        overhead = _overhead_ms(samples, True)
        key_rows.append(
            (
                f"{count:,}",
                f"{figures['rows']:,}",
                _phases(figures["fill"]),
                f"{figures['purged']:,}",
                f"{median_ms(samples[True, BARE]):.3f}",
                f"{median_ms(samples[True, KEYED]):.3f}",
                f"{p95_ms(samples[True, KEYED]):.3f}",
                f"{overhead:.3f}",
                f"{overhead / smallest:.2f}x",
                f"{median_ms(samples[False, BARE]):.3f}",
                f"{_overhead_ms(samples, False):.3f}",
            )
        )
    first_backlog = BACKLOGS[0]
    relay_rows = [
        (
            broker,
            f"{backlog:,}",
            f"{min(backlog, SLICE):,}",
            f"{rate:,.0f}",
            f"{rate / rates[first_backlog]:.2f}x",
        )
        for broker, rates in relays["rates"].items()
        for backlog, rate in rates.items()
    ]
    fills = ", ".join(
        f"{backlog:,} in {_phases(phases)}"
        for backlog, phases in relays["fills"].items()
    )
    return "\n".join(
        [
            "## Growth: keys and backlogs at scale",
            "",
            "### The keyed request's overhead as the record table grows",
            "",
            "The table is filled to each size by one `INSERT ... SELECT ... FROM "
            f"generate_series` (from {BULK:,} rows up, the secondary indexes "
            "are dropped and rebuilt around it; the fill time includes the "
            "rebuild, then `VACUUM ANALYZE` and a `CHECKPOINT`): completed "
            "keys with random UUID-shaped keys over 1,000 "
            f"scopes, made over the last {KEY_SPREAD_HOURS} hours with a "
            f"{KEY_LIFETIME_HOURS}-hour lifetime, so about half have expired. "
            "At each size, a separate process runs "
            f"`retention.purge(only=['idempotency'], batch_size={PURGE_BATCH})` "
            "over and over while the bare view and the keyed view (atomic, "
            "in-process, as in the first section) take turns, "
            f"{ROUNDS} rounds of {PER_ROUND} each after {WARMUP} of warm-up; "
            "the purge runs in every other round and waits between two "
            "batches in the rest, so the paused rounds split the purge's "
            f"share of the {os.cpu_count()} cores from the table's size. "
            "Overhead is keyed "
            "median minus bare median; the medians and p95 are of the rounds "
            "with the purge running. The rows are dropped afterwards.",
            "",
            f"![Keyed request's overhead by records in the table]"
            f"({os.path.basename(KEYS_CHART)})",
            "",
            table(
                (
                    "records",
                    "rows at start",
                    "fill",
                    "purged meanwhile",
                    "bare median ms",
                    "keyed median ms",
                    "keyed p95 ms",
                    "overhead ms",
                    f"overhead vs {next(iter(keys)):,}",
                    "bare median ms, purge paused",
                    "overhead ms, purge paused",
                ),
                key_rows,
            ),
            "",
            "### Relay throughput as the backlog grows",
            "",
            "Pending outbox messages, already due, filled the same way in "
            f"database `{connections[ALIAS].settings_dict['NAME']}` ({fills}). "
            "At each backlog the relay's own `claim()` and `publish_batch()` "
            f"(batch {RELAY_BATCH}) publish the first {SLICE:,} messages, or "
            "the whole backlog when smaller, to each broker in turn; the "
            "backlog is topped up between brokers. One run each.",
            "",
            f"![Relay throughput by backlog]({os.path.basename(RELAY_CHART)})",
            "",
            table(
                (
                    "broker",
                    "pending messages",
                    "published",
                    "messages/s",
                    f"vs {first_backlog:,} pending",
                ),
                relay_rows,
            ),
            "",
            f"This part took {took:.0f} s, fills included.",
            "",
        ]
    )
