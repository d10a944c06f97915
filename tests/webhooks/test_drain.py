"""Real threads on PostgreSQL: concurrent drains share the received receipts."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from tests.webhooks.locks import HOLD, receipt_held_by_another_worker
from webhooks import processing
from webhooks.handlers import on
from webhooks.models import WebhookReceipt

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

RECEIPTS = 60


def test_two_concurrent_drains_process_every_receipt_exactly_once(isolation_level):
    runs = []
    lock = threading.Lock()

    @on("github", "push")
    def count(event):
        with lock:
            runs.append(event.delivery_id)

    now = timezone.now()
    WebhookReceipt.objects.bulk_create(
        WebhookReceipt(
            source="github",
            delivery_id=f"evt_{n}",
            event_type="push",
            body=b'{"id": "evt"}',
            headers={"Content-Type": "application/json"},
            received_at=now,
        )
        for n in range(RECEIPTS)
    )
    start = threading.Barrier(2)
    ran = []
    errors = []

    def drain():
        try:
            start.wait(10)
            ran.append(processing.drain(10 * RECEIPTS, retry=errors.append))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=drain) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == []
    assert sorted(runs) == sorted(f"evt_{n}" for n in range(RECEIPTS))
    assert sum(ran) == RECEIPTS
    assert all(ran), f"one drain took every receipt: {ran}"
    assert set(WebhookReceipt.objects.values_list("state", "attempts")) == {
        ("processed", 1)
    }


def test_a_drain_skips_a_receipt_another_worker_holds_at_once_and_takes_the_next():
    """SKIP LOCKED is required: without it the drain would wait on the held
    receipt for as long as its worker keeps it, then take it after all."""
    now = timezone.now()
    held, free = (
        WebhookReceipt.objects.create(
            source="github",
            delivery_id=f"evt_{name}",
            event_type="push",
            body=b'{"id": "evt"}',
            received_at=now + timedelta(seconds=offset),
        ).pk
        for offset, name in enumerate(("held", "free"))
    )
    # Another worker in the middle of processing the older receipt.
    with receipt_held_by_another_worker(held):
        started = time.monotonic()
        taken = processing.process_next()
        elapsed = time.monotonic() - started

    assert taken == free
    assert elapsed < HOLD / 5
    states = dict(WebhookReceipt.objects.values_list("pk", "state"))
    assert states == {held: "received", free: "skipped"}


def _received_from(source, delivery_ids, at):
    WebhookReceipt.objects.bulk_create(
        WebhookReceipt(
            source=source,
            delivery_id=delivery_id,
            event_type="push",
            body=b'{"id": "evt"}',
            headers={"Content-Type": "application/json"},
            received_at=at + timedelta(milliseconds=n),
        )
        for n, delivery_id in enumerate(delivery_ids)
    )


@pytest.fixture
def ran():
    """The delivery ids the github, stripe and retired sources' handlers ran
    for, in turn."""
    runs = []
    for source in ("github", "stripe", "retired"):
        on(source, "push")(lambda event: runs.append(event.delivery_id))
    return runs


def test_a_backlog_of_one_source_holds_no_other_source_back(ran):
    now = timezone.now()
    # A slow provider's backlog, all of it older than another's deliveries.
    backlog = [f"gh_{n}" for n in range(10)]
    _received_from("github", backlog, now)
    _received_from("stripe", ["in_0", "in_1", "in_2"], now + timedelta(seconds=1))

    assert processing.drain(6, retry=lambda pk: None) == 6

    # The sources take turns (in WEBHOOKS["SOURCES"] order), each its oldest.
    assert ran == ["gh_0", "in_0", "gh_1", "in_1", "gh_2", "in_2"]
    assert processing.drain(100, retry=lambda pk: None) == 7
    assert [pk for pk in ran if pk.startswith("gh_")] == backlog  # its own order


def test_a_source_no_longer_configured_drains_after_the_configured_ones(ran):
    now = timezone.now()
    _received_from("retired", ["old_0", "old_1"], now)
    _received_from("github", ["gh_0"], now + timedelta(seconds=1))

    assert processing.drain(100, retry=lambda pk: None) == 3

    assert ran == ["gh_0", "old_0", "old_1"]
    assert set(WebhookReceipt.objects.values_list("state", flat=True)) == {"processed"}
