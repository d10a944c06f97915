"""Relay throughput against a bare kombu loop."""

import multiprocessing
import os
import time

from django.core.management import call_command
from django.db import connections
from kombu import Connection, Exchange, Queue

BROKER_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
DATABASE_URL = os.environ.get(
    "BENCH_OUTBOX_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/once_bench_outbox"
)
ALIAS = "outbox_bench"
BACKLOG = 20_000
BATCH_SIZES = (100, 500, 1000)
EXCHANGE = Exchange("outbox-bench", type="topic", durable=True)
QUEUE = Queue("outbox-bench", EXCHANGE, routing_key="order")


def run() -> str:
    _use_bench_database()
    bare = _bare_kombu_loop()
    relay_rates = {size: _relay(size, processes=1) for size in BATCH_SIZES}
    two = _relay(500, processes=2)
    lines = [
        "## Outbox relay",
        "",
        f"Backlog of {BACKLOG:,} messages drained to Redis ({BROKER_URL}), "
        "PostgreSQL database `once_bench_outbox`; the bare loop publishes the "
        "same bodies and headers with kombu, no database.",
        "",
        "| run | messages/s | vs bare kombu loop |",
        "|---|---:|---:|",
        f"| bare kombu publish loop | {bare:,.0f} | 1.00x |",
    ]
    for size, rate in relay_rates.items():
        lines.append(
            f"| relay, 1 process, batch {size} | {rate:,.0f} | {rate / bare:.2f}x |"
        )
    one = relay_rates[500]
    lines += [
        f"| relay, 2 processes, batch 500 | {two:,.0f} | {two / bare:.2f}x |",
        "",
        f"Two relay processes vs one (batch 500): {two / one:.2f}x.",
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


def _purge_queue():
    with Connection(BROKER_URL) as conn:
        channel = conn.channel()
        QUEUE(channel).declare()
        QUEUE(channel).purge()


def _bare_kombu_loop() -> float:
    from outbox.publishers import envelope

    _purge_queue()
    messages = _messages(BACKLOG)
    with Connection(BROKER_URL) as conn:
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
                retry=False,
            )
        elapsed = time.perf_counter() - started
    _purge_queue()
    return BACKLOG / elapsed


def _messages(count):
    from django.utils import timezone

    from outbox.models import OutboxMessage

    now = timezone.now()
    messages = []
    for i in range(count):
        message = OutboxMessage(
            aggregatetype="order",
            aggregateid=str(i),
            type="order.created",
            payload={"order": i, "sku": "BOOK-1", "quantity": 1},
            created_at=now,
            available_at=now,
        )
        message.headers = {"once-message-id": str(message.id)}
        messages.append(message)
    return messages


def _relay(batch_size, *, processes) -> float:
    from outbox.models import OutboxMessage

    _purge_queue()
    manager = OutboxMessage.objects.using(ALIAS)
    manager.all().delete()
    manager.bulk_create(_messages(BACKLOG), batch_size=2000)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("VACUUM ANALYZE outbox_message")
    # Children open their own connections; none may share the parent's socket.
    connections.close_all()
    context = multiprocessing.get_context("fork")
    started = time.perf_counter()
    workers = [
        context.Process(target=_drain, args=(batch_size,)) for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    published = manager.published().count()
    assert published == BACKLOG, f"only {published} of {BACKLOG} published"
    _purge_queue()
    return BACKLOG / elapsed


def _drain(batch_size):
    from outbox import relay
    from outbox.publishers import KombuPublisher

    publisher = KombuPublisher(url=BROKER_URL, exchange=EXCHANGE.name, declare=(QUEUE,))
    relay.drain(
        batch_size=batch_size, time_budget=3600, publisher=publisher, using=ALIAS
    )
    connections.close_all()
