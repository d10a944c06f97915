"""The inbox's overhead (relay throughput is bench/relay.py)."""

import os
import statistics
import time
import uuid

from django.core.management import call_command
from django.db import connections, transaction

DATABASE_URL = os.environ.get(
    "BENCH_OUTBOX_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/once_bench_outbox"
)
ALIAS = "outbox_bench"
DELIVERIES = 2_000
# Alternating rounds of each consumer; the median rate of each is reported.
INBOX_ROUNDS = 7


def run() -> str:
    _use_bench_database()
    with_inbox, without_inbox, floor = _inbox_overhead()
    lines = [
        "## Inbox",
        "",
        f"Inbox: {INBOX_ROUNDS} alternating rounds of {DELIVERIES:,} deliveries "
        "(median rate of each) to a consumer that locks and updates "
        "one row in a transaction, with and without `receive()`.",
        "",
        "| consumer | deliveries/s |",
        "|---|---:|",
        f"| without receive() | {without_inbox:,.0f} |",
        f"| with a hand-written INSERT of the same row (the floor) | {floor:,.0f} |",
        f"| with receive() | {with_inbox:,.0f} |",
        "",
        f"Inbox overhead (time per delivery, with / without): "
        f"{without_inbox / with_inbox:.2f}x.",
        f"Floor, the bare INSERT alone: {without_inbox / floor:.2f}x.",
        "",
    ]
    return "\n".join(lines)


def _use_bench_database():
    import environ
    import psycopg

    config = environ.Env.db_url_config(DATABASE_URL)
    admin = psycopg.connect(
        host=config["HOST"],
        port=config["PORT"] or 5432,
        user=config["USER"],
        password=config["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    )
    exists = admin.execute(
        "SELECT 1 FROM pg_database WHERE datname = %s", [config["NAME"]]
    ).fetchone()
    if not exists:
        admin.execute(f'CREATE DATABASE "{config["NAME"]}"')
    admin.close()
    # An alias of our own, so the bench never touches the default database.
    configured = connections.configure_settings({"default": config})
    connections.settings[ALIAS] = configured["default"]
    call_command("migrate", "outbox", database=ALIAS, verbosity=0)
    call_command("migrate", "inbox", database=ALIAS, verbosity=0)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS bench_counter (id int PRIMARY KEY, n bigint)"
        )
        cursor.execute(
            "INSERT INTO bench_counter VALUES (1, 0) ON CONFLICT (id) DO NOTHING"
        )


def _inbox_overhead():
    from inbox.api import receive

    def apply(cursor):
        # A typical consumer: lock the row it changes, then change it.
        cursor.execute("SELECT n FROM bench_counter WHERE id = 1 FOR UPDATE")
        cursor.execute("UPDATE bench_counter SET n = n + 1 WHERE id = 1")

    connection = connections[ALIAS]

    def without():
        for _ in range(DELIVERIES):
            with transaction.atomic(using=ALIAS), connection.cursor() as cursor:
                apply(cursor)

    def with_receive():
        # Fresh ids every round: a reused id would time the redelivery path.
        run_id = uuid.uuid4().hex
        for i in range(DELIVERIES):
            with receive("bench", f"{run_id}-{i}", using=ALIAS) as delivery:
                if not delivery.duplicate:
                    with connection.cursor() as cursor:
                        apply(cursor)

    def bare_insert():
        # The floor: the same insert as receive(), written by hand in the
        # consumer's transaction, so the report shows what the row itself costs.
        run_id = uuid.uuid4().hex
        for i in range(DELIVERIES):
            with transaction.atomic(using=ALIAS), connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO inbox_message (subscriber, message_id, "
                    "received_at, duplicates) VALUES (%s, %s, now(), 0) "
                    "ON CONFLICT DO NOTHING RETURNING id",
                    ["bench", f"{run_id}-{i}"],
                )
                apply(cursor)

    rates = {"with": [], "without": [], "floor": []}
    consumers = (("without", without), ("floor", bare_insert), ("with", with_receive))
    for _ in range(INBOX_ROUNDS):
        for name, consumer in consumers:
            started = time.perf_counter()
            consumer()
            rates[name].append(DELIVERIES / (time.perf_counter() - started))
    rates = {name: statistics.median(values) for name, values in rates.items()}
    return rates["with"], rates["without"], rates["floor"]
