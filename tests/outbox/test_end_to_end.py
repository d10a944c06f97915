"""Orders -> outbox -> relay -> Redis -> a real celery worker -> inbox -> stock."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Sum

from inbox.models import InboxMessage
from outbox import relay
from outbox.models import OutboxMessage
from outbox.publishers import CeleryTaskPublisher
from project.shop.models import Order, Stock

from .conftest import REDIS_URL

ROOT = Path(__file__).resolve().parents[2]
ORDERS = [("BOOK-1", 1), ("BOOK-1", 2), ("MUG-2", 3), ("BOOK-1", 4), ("MUG-2", 5)]


@pytest.fixture
def worker_queue():
    """A celery worker process on Redis consuming a queue of its own."""
    queue = f"outbox-test-e2e-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.outbox.worker_settings",
        "ONCE_WORKER_DATABASE": connection.settings_dict["NAME"],
        "CELERY_BROKER_URL": REDIS_URL,
    }
    command = [sys.executable, "-m", "celery", "-A", "project", "worker"]
    options = ["-P", "solo", "-Q", queue, "-l", "warning", "--without-gossip"]
    worker = subprocess.Popen(
        [*command, *options, "--without-mingle", "--without-heartbeat"],
        cwd=ROOT,
        env=env,
    )
    yield queue
    worker.terminate()
    worker.wait(20)


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
        tasks={"order.created": "shop.reserve_stock"},
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

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        duplicates = InboxMessage.objects.aggregate(n=Sum("duplicates"))["n"] or 0
        if InboxMessage.objects.count() == len(ORDERS) and duplicates == len(ORDERS):
            break
        time.sleep(0.2)
    else:
        pytest.fail("the worker did not consume both deliveries of every event")

    book, mug = Stock.objects.order_by("sku")
    assert (book.on_hand, book.reserved) == (93, 7)
    assert (mug.on_hand, mug.reserved) == (92, 8)
    assert Order.objects.count() == len(ORDERS)
