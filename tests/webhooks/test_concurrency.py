"""Real threads on PostgreSQL: racing deliveries and racing workers."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from celery.contrib.testing.worker import start_worker
from django.db import connections
from django.test import Client, override_settings
from django.utils import timezone

from tests.conftest import run_concurrently
from tests.webhooks import signing
from tests.webhooks.locks import HOLD, receipt_held_by_another_worker
from webhooks import processing
from webhooks.handlers import on
from webhooks.models import WebhookReceipt, WebhookRejection
from webhooks.querysets import WebhookReceiptQuerySet as WebhookQuerySet

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def runs():
    seen = []
    lock = threading.Lock()

    @on("github", "push")
    def count(event):
        # Long enough for the other threads to arrive while this one works.
        time.sleep(0.05)
        with lock:
            seen.append(event.delivery_id)

    return seen


def _stored_receipt() -> int:
    """A verified delivery stored and not yet processed."""
    return WebhookReceipt.objects.create(
        source="github",
        delivery_id="evt_race",
        event_type="push",
        body=signing.event_body("evt_race"),
        received_at=timezone.now(),
    ).pk


def deliver(_index=0):
    body = signing.event_body("evt_race")
    headers = signing.github_headers(body, delivery_id="evt_race")
    response = Client().post(
        "/webhooks/github/", body, content_type="application/json", headers=headers
    )
    return response.status_code


def test_eight_concurrent_deliveries_make_one_receipt_processed_once(runs):
    statuses = run_concurrently(8, deliver)

    assert sorted(statuses) == [200] * 7 + [202]
    assert WebhookReceipt.objects.count() == 1
    assert WebhookReceipt.objects.get().state == "processed"
    assert runs == ["evt_race"]


def test_one_body_sent_at_once_under_two_delivery_ids_makes_one_receipt(runs):
    """GitHub does not sign X-GitHub-Delivery: the body's unique hash, in the
    same INSERT, decides which of two racing copies is the delivery."""
    body = signing.event_body("evt_race")

    def deliver_as(index):
        headers = signing.github_headers(body, delivery_id=f"evt_copy_{index}")
        return (
            Client()
            .post(
                "/webhooks/github/",
                body,
                content_type="application/json",
                headers=headers,
            )
            .status_code
        )

    statuses = run_concurrently(2, deliver_as)

    assert sorted(statuses) == [200, 202]
    assert WebhookReceipt.objects.count() == 1
    assert WebhookReceipt.objects.get().state == "processed"
    assert len(runs) == 1
    replays = WebhookRejection.objects.get(reason="replayed-body")
    assert (replays.source, replays.count) == ("github", 1)


def test_eight_concurrent_workers_run_the_handlers_once(
    runs, eager_celery, isolation_level
):
    eager_celery.conf.task_always_eager = False
    body = signing.event_body("evt_race")
    enqueued = []
    # Store without processing: these workers race on the stored receipt.
    with override_settings(
        WEBHOOKS={
            "SOURCES": {
                "github": {"VERIFIER": "github", "SECRETS": [signing.GITHUB_SECRET]}
            },
            "ENQUEUE": enqueued.append,
        }
    ):
        headers = signing.github_headers(body, delivery_id="evt_race")
        Client().post("/webhooks/github/", body, "application/json", headers=headers)
    pk = WebhookReceipt.objects.get().pk
    assert enqueued == [pk]

    states = run_concurrently(8, lambda _: processing.process(pk))

    assert runs == ["evt_race"]
    assert "processed" in states
    assert set(states) <= {"processed", processing.Outcome.BUSY}


def test_racing_redeliveries_of_a_failed_receipt_reopen_and_enqueue_it_once(settings):
    # GitHub's "Redeliver" clicked twice (or two retries crossing): one
    # reopens the failed receipt and enqueues it, the others are duplicates
    # of a received receipt, so its handlers run once more, not once each.
    enqueued = []
    settings.WEBHOOKS = {**settings.WEBHOOKS, "ENQUEUE": enqueued.append}
    pk = _stored_receipt()
    WebhookReceipt.objects.filter(pk=pk).update(state="failed", attempts=1)

    statuses = run_concurrently(8, deliver)

    assert sorted(statuses) == [200] * 7 + [202]
    assert enqueued == [pk]
    assert WebhookReceipt.objects.get(pk=pk).state == "received"


def test_a_worker_finding_the_receipt_locked_leaves_at_once_without_running_it(runs):
    """SKIP LOCKED is required, not merely allowed: without it, process()
    would queue behind the lock for as long as the holder keeps it."""
    pk = _stored_receipt()
    # Another worker in the middle of processing: the row lock, held.
    with receipt_held_by_another_worker(pk):
        started = time.monotonic()
        outcome = processing.process(pk)
        elapsed = time.monotonic() - started

    assert outcome == processing.Outcome.BUSY
    assert elapsed < HOLD / 5
    assert runs == []
    assert WebhookReceipt.objects.get().state == "received"


@pytest.mark.parametrize("isolation_level", ["repeatable read"], indirect=True)
def test_a_worker_whose_snapshot_predates_anothers_finish_finds_it_processed(
    runs, monkeypatch, isolation_level
):
    # Its transaction's snapshot is taken, then another worker processes the
    # receipt and commits, then it locks the row: PostgreSQL refuses that
    # lock at REPEATABLE READ. It is no failure of the receipt's.
    pk = _stored_receipt()
    snapshot_taken, other_done = threading.Event(), threading.Event()
    lock_for_processing = WebhookQuerySet.lock_for_processing
    failed = []
    processing.signals.delivery_failed.connect(
        lambda **kwargs: failed.append(kwargs), weak=False, dispatch_uid="t"
    )

    def late_lock(self, receipt_id):
        if threading.current_thread().name == "late" and not snapshot_taken.is_set():
            WebhookReceipt.objects.exists()  # the snapshot
            snapshot_taken.set()
            other_done.wait(10)
        return lock_for_processing(self, receipt_id)

    monkeypatch.setattr(WebhookQuerySet, "lock_for_processing", late_lock)
    outcome = []

    def late():
        try:
            outcome.append(processing.process(pk))
        except Exception as exc:  # pragma: no cover - reported below
            outcome.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=late, name="late")
    thread.start()
    snapshot_taken.wait(10)
    try:
        assert processing.process(pk) == "processed"
    finally:
        other_done.set()
        thread.join(10)
        processing.signals.delivery_failed.disconnect(dispatch_uid="t")

    assert outcome == ["processed"]
    assert runs == ["evt_race"]
    assert failed == []


def test_a_real_worker_processes_a_delivery(runs, eager_celery):
    """Intake -> on_commit -> broker -> worker thread -> handler, for real."""
    app = eager_celery
    memory = {
        "task_always_eager": False,
        "broker_url": "memory://",
        "broker_read_url": "memory://",
        "broker_write_url": "memory://",
        "result_backend": "cache+memory://",
        "broker_transport_options": {"polling_interval": 0.05},
    }
    saved = {key: app.conf[key] for key in memory}
    app.conf.update(memory)
    _drop_connections(app)  # made for the settings' broker, if any
    try:
        with start_worker(app, pool="solo", perform_ping_check=False):
            assert deliver() == 202
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not runs:
                time.sleep(0.02)
    finally:
        app.conf.update(saved)
        _drop_connections(app)
    assert WebhookReceipt.objects.get().state == "processed"
    assert runs == ["evt_race"]


def _drop_connections(app):
    app._pool = None
    app.amqp._producer_pool = None


def test_a_receipt_removed_between_the_insert_and_its_read_makes_a_fresh_delivery(
    monkeypatch, runs
):
    """A purge (or a delete) commits on another connection after the INSERT
    conflicted with the receipt and before the view reads it: the delivery
    is inserted again as new, never a 500."""
    assert deliver() == 202
    first = WebhookReceipt.objects.get()
    duplicate_of = WebhookQuerySet.duplicate_of
    removed = []

    def removed_first(self, *args):
        if not removed:
            # Another connection (run_concurrently's thread) commits it.
            removed.append(run_concurrently(1, lambda _: _delete(first.pk)))
        return duplicate_of(self, *args)

    monkeypatch.setattr(WebhookQuerySet, "duplicate_of", removed_first)

    assert deliver() == 202
    assert removed == [[1]]
    again = WebhookReceipt.objects.get()
    assert again.pk != first.pk
    assert again.state == "processed"  # enqueued and run (eager Celery)
    assert runs == ["evt_race", "evt_race"]


def test_a_delivery_whose_conflict_keeps_vanishing_is_503_to_retry(monkeypatch):
    assert deliver() == 202
    monkeypatch.setattr(WebhookQuerySet, "duplicate_of", lambda self, *args: None)

    response = Client().post(
        "/webhooks/github/",
        signing.event_body("evt_race"),
        content_type="application/json",
        headers=signing.github_headers(
            signing.event_body("evt_race"), delivery_id="evt_race"
        ),
    )

    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert response["Content-Type"] == "application/problem+json"
    assert WebhookReceipt.objects.count() == 1


def _delete(pk):
    return WebhookReceipt.objects.filter(pk=pk).delete()[0]


def _wait_for_a_lock_wait(seconds=10.0):
    """Until another backend waits on a lock (the reopen on the row lock)."""
    deadline = time.monotonic() + seconds
    with connections["default"].cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                "'Lock' AND datname = current_database()"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.01)
    raise AssertionError("no backend waited on the receipt's lock")


def test_a_redelivery_during_a_failing_retry_is_reopened_and_runs(
    settings, monkeypatch
):
    # The retry of a failed receipt holds its row lock while its handler
    # runs; the provider's redelivery waits on that lock to reopen it, and
    # does once the retry rolls back. The retry's failure mark then left the
    # reopened receipt failed, and the redelivery's drain found nothing.
    settings.WEBHOOKS = {**settings.WEBHOOKS, "ENQUEUE": lambda pk: None}
    calls, started, go = [], threading.Event(), threading.Event()

    @on("github", "push")
    def flaky(event):
        calls.append(event.delivery_id)
        if len(calls) == 1:
            started.set()
            go.wait(10)
            raise RuntimeError("downstream still down")

    pk = _stored_receipt()
    WebhookReceipt.objects.filter(pk=pk).update(state="failed", attempts=1)
    reopened = threading.Event()
    record_failure = WebhookQuerySet.record_failure

    def after_the_reopen(self, *args, **kwargs):
        reopened.wait(10)  # the order that lost the redelivery
        return record_failure(self, *args, **kwargs)

    monkeypatch.setattr(WebhookQuerySet, "record_failure", after_the_reopen)

    def worker():  # the task's retry
        try:
            processing.process(pk)
        except processing.HandlerFailed:
            pass
        finally:
            connections.close_all()

    def redeliver():
        try:
            answer.append(deliver())
        finally:
            reopened.set()
            connections.close_all()

    thread, answer = threading.Thread(target=worker), []
    thread.start()
    try:
        assert started.wait(10)
        redelivery = threading.Thread(target=redeliver)
        redelivery.start()
        _wait_for_a_lock_wait()
    finally:
        go.set()
        thread.join(10)
    redelivery.join(10)

    assert answer == [202]
    assert WebhookReceipt.objects.get(pk=pk).state == "received"
    processing.drain(10, lambda pk: None)  # the drain the redelivery kicked
    assert WebhookReceipt.objects.get(pk=pk).state == "processed"
    assert calls == ["evt_race", "evt_race"]


def test_a_receipt_being_processed_reads_received_and_a_redelivery_waits_on_nothing(
    settings,
):
    # Receipts never enter "processing": the row lock alone makes the run
    # exclusive, so another connection reads the receipt as received while
    # its handlers run, and the provider's resend is a plain duplicate,
    # answered at once and enqueued nowhere.
    enqueued = []
    settings.WEBHOOKS = {**settings.WEBHOOKS, "ENQUEUE": enqueued.append}
    running, finish = threading.Event(), threading.Event()

    @on("github", "push")
    def slow(event):
        running.set()
        finish.wait(10)

    pk = _stored_receipt()

    def worker():
        try:
            return processing.process(pk)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        run = pool.submit(worker)
        try:
            assert running.wait(10)
            assert WebhookReceipt.objects.get(pk=pk).state == "received"
            started = time.monotonic()
            assert deliver() == 200
            assert time.monotonic() - started < 2
            assert enqueued == []
        finally:
            finish.set()
        assert run.result(10) == processing.Outcome.PROCESSED
    assert WebhookReceipt.objects.get(pk=pk).state == "processed"
