"""The inbox's cost per delivery: receive() against the consumer without it."""

import os
import statistics
import time
import uuid

from django.db import connections, transaction

from idempotency.shared import clock

from . import database

DATABASE_URL = os.environ.get(
    "BENCH_INBOX_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/once_bench_inbox"
)
ALIAS = "inbox_bench"
DELIVERIES = 1_000
# Many short alternating rounds, each starting with the next consumer, so
# drift and the other load on a shared machine hit all three alike.
ROUNDS = 15
# Then single deliveries in turn, timed one by one: the median of each is
# the figure a burst of load on the machine moves least.
INTERLEAVED = 3_000
# receive() against its floor: the same claim statement, written by hand.
TARGET = 1.1
CONSUMERS = (
    ("without", "without receive()"),
    ("floor", "with a hand-written INSERT of the same row (the floor)"),
    ("with", "with receive()"),
)


def run() -> str:
    _use_bench_database()
    consumers = _consumers()
    rates = rounds(consumers)
    times = interleaved(consumers)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    typical = {name: statistics.median(values) for name, values in times.items()}
    without = medians["without"]
    lines = [
        "## Inbox",
        "",
        "A consumer that locks and updates one row in a transaction, without "
        "the inbox, with a hand-written INSERT of the inbox row, and with "
        "`receive()`; PostgreSQL database `once_bench_inbox`, real commits.",
        "",
        f"{ROUNDS} alternating rounds of {DELIVERIES:,} deliveries, each round "
        "starting with the next consumer: the median round's rate (slowest and "
        "fastest in brackets), its time per delivery against the consumer "
        "without the inbox, and the median of that ratio taken within each "
        f"round. Then {INTERLEAVED:,} single deliveries of each in turn: the "
        "median time of one, which bursts of other load move least.",
        "",
        "| consumer | deliveries/s | vs without | paired per round "
        "| median delivery | vs without |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, label in CONSUMERS:
        samples = rates[name]
        paired = statistics.median(
            alone / rate for alone, rate in zip(rates["without"], samples, strict=True)
        )
        lines.append(
            f"| {label} | {medians[name]:,.0f} "
            f"({min(samples):,.0f} to {max(samples):,.0f}) "
            f"| {without / medians[name]:.2f}x | {paired:.2f}x "
            f"| {typical[name] / 1e3:,.0f} µs "
            f"| {typical[name] / typical['without']:.2f}x |"
        )
    over_floor = statistics.median(
        floor / rate for floor, rate in zip(rates["floor"], rates["with"], strict=True)
    )
    single = typical["with"] / typical["floor"]
    verdict = "met" if max(over_floor, single) <= TARGET else "missed"
    lines += [
        "",
        f"Target: `receive()` <= {TARGET:.2f}x its floor, the consumer with the "
        "same claim statement written by hand (what the row itself costs): "
        f"{over_floor:.2f}x paired per round, {single:.2f}x single deliveries "
        f"({verdict}). Against the consumer without the inbox: "
        f"{without / medians['with']:.2f}x, the floor "
        f"{without / medians['floor']:.2f}x.",
        "",
    ]
    return "\n".join(lines)


def rounds(consumers, count=ROUNDS, deliveries=DELIVERIES) -> dict[str, list]:
    """Deliveries/s of each consumer, one rate per round."""
    rates: dict[str, list[float]] = {name: [] for name, _ in CONSUMERS}
    order = list(consumers.items())
    for round_ in range(count):
        start = round_ % len(order)
        for name, deliver in order[start:] + order[:start]:
            # Fresh ids every round: a reused id would time the redelivery path.
            run_id = uuid.uuid4().hex
            started = time.perf_counter()
            for i in range(deliveries):
                deliver(f"{run_id}-{i}")
            rates[name].append(deliveries / (time.perf_counter() - started))
    return rates


def interleaved(consumers, count=INTERLEAVED) -> dict[str, list]:
    """Nanoseconds of each single delivery, the consumers taking turns."""
    times: dict[str, list[int]] = {name: [] for name, _ in CONSUMERS}
    order = list(consumers.items())
    run_id = uuid.uuid4().hex
    for i in range(count):
        start = i % len(order)
        for name, deliver in order[start:] + order[:start]:
            started = time.perf_counter_ns()
            deliver(f"{run_id}-{name}-{i}")
            times[name].append(time.perf_counter_ns() - started)
    return times


FLOOR_CLAIM = (
    "INSERT INTO inbox_message (subscriber, message_id, received_at, duplicates, "
    "state) VALUES (%s, %s, %s, 0, 'applied') "
    "ON CONFLICT (subscriber, message_id) DO UPDATE SET "
    "duplicates = inbox_message.duplicates "
    "+ CASE WHEN inbox_message.state = 'dead' THEN 0 ELSE 1 END, "
    "received_at = CASE WHEN inbox_message.state = 'dead' "
    "THEN excluded.received_at ELSE inbox_message.received_at END, "
    "state = 'applied' RETURNING duplicates"
)


def _consumers():
    """One delivery of each consumer, given a fresh message id."""
    from inbox.api import receive

    connection = connections[ALIAS]

    def apply(cursor):
        # A typical consumer: lock the row it changes, then change it.
        cursor.execute("SELECT n FROM bench_counter WHERE id = 1 FOR UPDATE")
        cursor.execute("UPDATE bench_counter SET n = n + 1 WHERE id = 1")

    def without(message_id):
        with transaction.atomic(using=ALIAS), connection.cursor() as cursor:
            apply(cursor)

    def floor(message_id):
        # The statement receive() sends, written by hand in the consumer's
        # transaction, so the report shows what the row itself costs. On a
        # cursor of its own, as receive() runs it: the consumer's work opens
        # its own, as with receive().
        with transaction.atomic(using=ALIAS):
            with connection.cursor() as cursor:
                cursor.execute(FLOOR_CLAIM, ["bench", message_id, clock.now()])
                (duplicates,) = cursor.fetchone()
            if duplicates == 0:
                with connection.cursor() as cursor:
                    apply(cursor)

    def with_receive(message_id):
        with receive("bench", message_id, using=ALIAS) as delivery:
            if not delivery.duplicate:
                with connection.cursor() as cursor:
                    apply(cursor)

    return {"without": without, "floor": floor, "with": with_receive}


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
