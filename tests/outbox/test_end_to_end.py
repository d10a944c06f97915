"""Orders -> outbox -> relay -> Redis -> a real celery worker -> inbox -> stock."""

import os
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.db.models import Sum

from inbox.models import InboxMessage
from outbox import relay
from outbox.api import record
from outbox.models import OutboxMessage
from outbox.publishers import CeleryTaskPublisher
from tests.servers import OUTBOX_HEADERS_REDIS_URL as HEADERS_REDIS_URL
from tests.testapp.models import Order, Stock

from .conftest import REDIS_URL

ROOT = Path(__file__).resolve().parents[2]
ORDERS = [("BOOK-1", 1), ("BOOK-1", 2), ("MUG-2", 3), ("BOOK-1", 4), ("MUG-2", 5)]


@contextmanager
def celery_worker(broker_url):
    """A celery worker process on ``broker_url`` consuming a queue of its own."""
    queue = f"outbox-test-e2e-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.outbox.worker_settings",
        "ONCE_WORKER_DATABASE": connection.settings_dict["NAME"],
        "CELERY_BROKER_URL": broker_url,
    }
    command = [sys.executable, "-m", "celery", "-A", "tests.celery", "worker"]
    options = ["-P", "solo", "-Q", queue, "-l", "warning", "--without-gossip"]
    worker = subprocess.Popen(
        [*command, *options, "--without-mingle", "--without-heartbeat"],
        cwd=ROOT,
        env=env,
    )
    try:
        yield queue
    finally:
        worker.terminate()
        worker.wait(20)


@pytest.fixture
def worker_queue():
    with celery_worker(REDIS_URL) as queue:
        yield queue


def wait_for(condition, message):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    pytest.fail(message)


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_each_order_reserves_stock_exactly_once(api, clock, worker_queue):
    Stock.objects.create(sku="BOOK-1", on_hand=100)
    Stock.objects.create(sku="MUG-2", on_hand=100)
    for i, (sku, quantity) in enumerate(ORDERS):
        response = api.post(
            "/api/orders/", {"sku": sku, "quantity": quantity}, key=f"order-{i}"
        )
        assert response.status_code == 201
    assert OutboxMessage.objects.count() == len(ORDERS)

    publisher = CeleryTaskPublisher(
        tasks={"order.created": "testapp.reserve_stock"},
        queue=worker_queue,
        broker_url=REDIS_URL,
    )
    # The relay publishes every event, then dies before marking them...
    with publisher:
        for message in relay.claim(100):
            publisher.publish(message)
    # ...so once its lease lapsed, the next relay publishes them all again.
    clock.advance(minutes=5)
    assert relay.drain(publisher=publisher).published == len(ORDERS)

    def both_deliveries_consumed():
        duplicates = InboxMessage.objects.aggregate(n=Sum("duplicates"))["n"] or 0
        return InboxMessage.objects.count() == len(ORDERS) == duplicates

    wait_for(
        both_deliveries_consumed,
        "the worker did not consume both deliveries of every event",
    )

    book, mug = Stock.objects.order_by("sku")
    assert (book.on_hand, book.reserved) == (93, 7)
    assert (mug.on_hand, mug.reserved) == (92, 8)
    assert Order.objects.count() == len(ORDERS)


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_event_headers_cannot_expire_or_reroute_the_task():
    """Headers Celery acts on, given to record(), reach the mapped task as the
    event's own: the worker neither discards the task as expired nor runs
    another one."""
    Stock.objects.create(sku="BOOK-1", on_hand=100)
    hostile = [
        {"expires": "2000-01-01T00:00:00Z"},
        {"task": "outbox.relay"},
        {"eta": "2999-01-01T00:00:00Z", "retries": 99},
    ]
    with transaction.atomic():
        ids = [
            str(
                record(
                    "order",
                    n,
                    "order.created",
                    {"sku": "BOOK-1", "quantity": 1},
                    headers=headers,
                )
            )
            for n, headers in enumerate(hostile)
        ]

    with celery_worker(HEADERS_REDIS_URL) as queue:
        publisher = CeleryTaskPublisher(
            tasks={"order.created": "testapp.reserve_stock"},
            queue=queue,
            broker_url=HEADERS_REDIS_URL,
        )
        assert relay.drain(publisher=publisher).published == len(hostile)
        wait_for(
            lambda: InboxMessage.objects.count() == len(hostile),
            "the worker did not run testapp.reserve_stock for every event",
        )

    # The consumer found each event's message id; each reserved its stock once.
    received = InboxMessage.objects.values_list("message_id", flat=True)
    assert sorted(received) == sorted(ids)
    stock = Stock.objects.get(sku="BOOK-1")
    assert (stock.on_hand, stock.reserved) == (97, 3)
