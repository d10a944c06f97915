"""A worker dies while processing a webhook receipt, as its own task or in a
drain: the receipt is processed once, by the worker that gets the message
next."""

import uuid

import pytest

from tests.testapp.models import Widget
from webhooks.models import WebhookReceipt

from .processes import celery_worker, send_task, wait_until

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

State = WebhookReceipt.State


@pytest.mark.parametrize(
    "task",
    [
        pytest.param("webhooks.process_receipt", id="own-task"),
        pytest.param("webhooks.drain", id="drain"),
    ],
)
@pytest.mark.parametrize(
    ("kill_after", "state", "widgets"),
    [
        # The handler's INSERT ran; the "processed" mark never committed.
        pytest.param(
            'INSERT INTO "testapp_widget"', State.RECEIVED, 0, id="mid-handler"
        ),
        # Committed, then died before the ack: the redelivery skips it.
        pytest.param("commit", State.PROCESSED, 1, id="after-commit-before-ack"),
    ],
)
def test_a_receipt_whose_worker_died_is_processed_once(
    intake, tmp_path, task, kill_after, state, widgets
):
    receipt_id = intake("delivery-1")
    # The drain finds the receipt itself: the default ENQUEUE's task.
    args = [receipt_id] if task == "webhooks.process_receipt" else []
    queue = f"faults-webhooks-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "killed"
    faults = {
        "FAULTS_KILL_TASK": task,
        "FAULTS_KILL_AFTER": kill_after,
        "FAULTS_KILL_ONCE": str(marker),
    }
    # solo: the task runs in the worker's own process, so the whole worker dies
    # and its message stays unacked in Redis.
    with celery_worker(queue, **faults) as worker:
        send_task(task, queue=queue, args=args)
        assert worker.wait_exit() == -9
    assert marker.exists()
    receipt = WebhookReceipt.objects.get()
    assert (receipt.state, Widget.objects.count()) == (state, widgets)

    # A second worker: Redis hands it the unacked message once its visibility
    # timeout has passed.
    with celery_worker(queue, **faults) as worker:

        def redelivered():
            return worker.ran(task) == 1

        wait_until(redelivered, "the redelivery was not processed", worker=worker)

    receipt.refresh_from_db()
    assert receipt.state == State.PROCESSED
    assert Widget.objects.count() == 1
    assert (receipt.attempts, receipt.last_error) == (1, "")
