"""The inbox's cost per delivery: receive() against the consumer without it."""

import os
import statistics
import time
import uuid

from django.db import connections, transaction

from . import database

DATABASE_URL = os.environ.get(
    "BENCH_INBOX_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/once_bench_inbox"
)
ALIAS = "inbox_bench"
DELIVERIES = 2_000
# Alternating rounds of each consumer, so drift hits all three; the median
# rate of each is reported.
ROUNDS = 9
TARGET = 1.35


def run() -> str:
    _use_bench_database()
    rates = measure()
    without = statistics.median(rates["without"])
    floor = statistics.median(rates["floor"])
    with_receive = statistics.median(rates["with"])
    overhead = without / with_receive
    verdict = "meets" if overhead <= TARGET else "misses"
    lines = [
        "## Inbox",
        "",
        f"{ROUNDS} alternating rounds of {DELIVERIES:,} deliveries (median rate "
        "of each, slowest and fastest round in brackets) to a consumer that locks and "
        "updates one row in a transaction, PostgreSQL database "
        "`once_bench_inbox`, real commits.",
        "",
        "| consumer | deliveries/s | time per delivery vs without |",
        "|---|---:|---:|",
        _row("without receive()", without, without, rates["without"]),
        _row(
            "with a hand-written INSERT of the same row (the floor)",
            floor,
            without,
            rates["floor"],
        ),
        _row("with receive()", with_receive, without, rates["with"]),
        "",
        f"Target: `receive()` <= {TARGET:.2f}x the consumer without it; "
        f"measured {overhead:.2f}x ({verdict} it). "
        f"The floor, the bare INSERT alone: {without / floor:.2f}x.",
        "",
    ]
    return "\n".join(lines)


def _row(name, rate, without, samples):
    spread = f"{min(samples):,.0f} to {max(samples):,.0f}"
    return f"| {name} | {rate:,.0f} ({spread}) | {without / rate:.2f}x |"


def measure(rounds=ROUNDS, deliveries=DELIVERIES) -> dict[str, list[float]]:
    """Rates in deliveries/s of each consumer, one per round."""
    from inbox.api import receive

    connection = connections[ALIAS]

    def apply(cursor):
        # A typical consumer: lock the row it changes, then change it.
        cursor.execute("SELECT n FROM bench_counter WHERE id = 1 FOR UPDATE")
        cursor.execute("UPDATE bench_counter SET n = n + 1 WHERE id = 1")

    def without():
        for _ in range(deliveries):
            with transaction.atomic(using=ALIAS), connection.cursor() as cursor:
                apply(cursor)

    def bare_insert():
        # The floor: the same insert as receive(), written by hand in the
        # consumer's transaction, so the report shows what the row itself costs.
        run_id = uuid.uuid4().hex
        for i in range(deliveries):
            with transaction.atomic(using=ALIAS), connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO inbox_message (subscriber, message_id, "
                    "received_at, duplicates) VALUES (%s, %s, now(), 0) "
                    "ON CONFLICT DO NOTHING RETURNING id",
                    ["bench", f"{run_id}-{i}"],
                )
                apply(cursor)

    def with_receive():
        # Fresh ids every round: a reused id would time the redelivery path.
        run_id = uuid.uuid4().hex
        for i in range(deliveries):
            with receive("bench", f"{run_id}-{i}", using=ALIAS) as delivery:
                if not delivery.duplicate:
                    with connection.cursor() as cursor:
                        apply(cursor)

    consumers = {"without": without, "floor": bare_insert, "with": with_receive}
    rates: dict[str, list[float]] = {name: [] for name in consumers}
    for _ in range(rounds):
        for name, consumer in consumers.items():
            started = time.perf_counter()
            consumer()
            rates[name].append(deliveries / (time.perf_counter() - started))
    return rates


def _use_bench_database():
    import environ

    config = environ.Env.db_url_config(DATABASE_URL)
    # An alias of our own, so the bench never touches the default database;
    # connections.settings is settings.DATABASES, which prepare() reads.
    configured = connections.configure_settings({"default": config})
    connections.settings[ALIAS] = configured["default"]
    database.prepare(ALIAS)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS bench_counter (id int PRIMARY KEY, n bigint)"
        )
        cursor.execute(
            "INSERT INTO bench_counter VALUES (1, 0) ON CONFLICT (id) DO NOTHING"
        )
        cursor.execute("TRUNCATE inbox_message")
