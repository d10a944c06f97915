"""A receipt whose handler kills its worker every time (out of memory, a
hard time limit) is drained with other sources' receipts: the others are
processed, and it ends failed once its worker died more times in a row than
its retries allow, instead of killing every drain, for ever, first.

The handlers are ``tests.faults.worker``'s: ``kill_the_worker`` (github
issues) SIGKILLs its own process, ``place_order_failing_once`` (standard)
raises on its first run, the others write one widget a receipt.
"""

import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.testapp.models import Widget
from webhooks.models import WebhookReceipt

from .processes import celery_worker, send_task

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

SETTINGS = "tests.faults.poison_settings"
MAX_RETRIES = 2  # poison_settings'
# More workers than the poison may kill: without the fix, each one dies.
ROUNDS = MAX_RETRIES + 4


def test_a_handler_killing_its_worker_fails_its_receipt_and_blocks_no_drain(
    tmp_path,
):
    now = timezone.now()
    # The oldest: every drain took it first.
    poison = _received("github", "issues", "issue-1", now)
    invoices = [
        _received("stripe", "invoice.paid", f"in_{n}", now + timedelta(seconds=n + 1))
        for n in range(3)
    ]
    push = _received("github", "push", "push-1", now + timedelta(seconds=4))
    order = _received("standard", "order.placed", "order-1", now + timedelta(seconds=5))
    others = [*invoices, push, order]
    queue = f"faults-webhook-poison-{uuid.uuid4().hex[:8]}"
    env = {"FAULTS_QUEUE": queue, "FAULTS_FAIL_ONCE": str(tmp_path / "failed")}

    deaths = 0
    others_ran_while_it_waited = False
    for _ in range(ROUNDS):
        # solo: the handler runs in the worker's own process, which it kills.
        with celery_worker(queue, settings=SETTINGS, **env) as worker:
            died = _drain_until_dead_or_settled(worker, queue, poison, others)
        deaths += died
        pending = _states()[poison] == "received"
        if (
            pending
            and not WebhookReceipt.objects.filter(pk__in=others, attempts=0).exists()
        ):
            # Every other receipt ran (the order failed, for its retry).
            others_ran_while_it_waited = True
        if not died:
            break

    states = _states()
    receipt = WebhookReceipt.objects.get(pk=poison)
    # (a) The other sources' receipts ran while it still had retries left,
    # and were processed once each.
    assert others_ran_while_it_waited, states
    assert {pk: states[pk] for pk in others} == dict.fromkeys(others, "processed")
    assert Widget.objects.count() == len(others)
    # (b) Its worker died once a run, first and retries, then it failed.
    assert deaths == MAX_RETRIES + 1
    assert receipt.state == "failed"
    assert "its handler's worker died 3 times" in receipt.last_error
    assert (receipt.attempts, receipt.worker_deaths, receipt.locked_until) == (
        MAX_RETRIES + 1,
        0,
        None,
    )
    # (c) The handler that raised was retried as before, and ran once more.
    assert (tmp_path / "failed").exists()
    assert WebhookReceipt.objects.get(pk=order).attempts == 2
    assert {WebhookReceipt.objects.get(pk=pk).attempts for pk in [*invoices, push]} == {
        1
    }


def _received(source, event_type, delivery_id, received_at) -> int:
    return WebhookReceipt.objects.create(
        source=source,
        delivery_id=delivery_id,
        event_type=event_type,
        body=b"{}",
        headers={"Content-Type": "application/json"},
        received_at=received_at,
    ).pk


def _states() -> dict[int, str]:
    return dict(WebhookReceipt.objects.values_list("pk", "state"))


def _all_processed(pks) -> bool:
    states = _states()
    return all(states[pk] == "processed" for pk in pks)


def _drain_until_dead_or_settled(worker, queue, poison, others, timeout=30.0):
    """Send a drain every second, as kicks do, until the worker dies (True)
    or the poison receipt failed and every other was processed (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        send_task("webhooks.drain", queue=queue)
        for _ in range(10):
            if worker.process.poll() is not None:
                return True
            if _states()[poison] == "failed" and _all_processed(others):
                return False
            time.sleep(0.1)
    raise AssertionError(
        f"neither died nor settled in {timeout:.0f} s: {_states()}\n"
        f"{worker.log()[-4000:]}"
    )
