"""A Celery worker dies mid inbox consumer task: the message comes back, and the
stock is reserved once."""

import uuid

import pytest
from django.db.models import Sum

from inbox.models import InboxMessage
from outbox import relay
from outbox.publishers import CeleryTaskPublisher
from tests.testapp.models import Order, Stock

from .processes import REDIS_URL, celery_worker, wait_until

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

ORDERS = [("BOOK-1", 2), ("BOOK-1", 3)]


def place_orders(api):
    for i, (sku, quantity) in enumerate(ORDERS):
        response = api.post(
            "/api/orders/", {"sku": sku, "quantity": quantity}, key=f"order-{i}"
        )
        assert response.status_code == 201


def relay_to(queue):
    publisher = CeleryTaskPublisher(
        tasks={"order.created": "testapp.reserve_stock"},
        queue=queue,
        broker_url=REDIS_URL,
    )
    assert relay.drain(publisher=publisher).published == len(ORDERS)


@pytest.mark.parametrize(
    ("kill_after", "duplicates"),
    [
        # The stock UPDATE ran after the inbox insert; the commit never came.
        pytest.param('UPDATE "testapp_stock"', 0, id="before-commit"),
        # Committed, then died before the ack: the redelivery is a duplicate.
        pytest.param("commit", 1, id="after-commit-before-ack"),
    ],
)
def test_a_consumer_killed_mid_task_is_redelivered_and_applied_once(
    api, tmp_path, kill_after, duplicates
):
    Stock.objects.create(sku="BOOK-1", on_hand=100)
    place_orders(api)
    queue = f"faults-inbox-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "killed"
    # prefork: the pool replaces its killed child, and reject-on-worker-lost
    # (acks_late) puts the message back in the queue for the new one.
    with celery_worker(
        queue,
        pool="prefork",
        FAULTS_KILL_TASK="testapp.reserve_stock",
        FAULTS_KILL_AFTER=kill_after,
        FAULTS_KILL_ONCE=str(marker),
    ) as worker:
        relay_to(queue)

        def consumed():
            # Applied, not just there: the redelivery of the killed run counts
            # that run on a dead row first, in a commit of its own.
            applied = InboxMessage.objects.filter(state=InboxMessage.State.APPLIED)
            received = applied.count() == len(ORDERS)
            dropped = InboxMessage.objects.aggregate(n=Sum("duplicates"))["n"]
            # At least: a redelivery that runs past the 2 s visibility timeout
            # (a loaded machine) is restored once more, and dropped too.
            return marker.exists() and received and dropped >= duplicates

        wait_until(consumed, "the messages were not consumed", worker=worker)
        assert "SIGKILL" in worker.log()  # the pool saw its child die

    stock = Stock.objects.get(sku="BOOK-1")
    ordered = sum(quantity for _, quantity in ORDERS)
    assert (stock.on_hand, stock.reserved) == (100 - ordered, ordered)
    assert Order.objects.count() == InboxMessage.objects.count() == len(ORDERS)
