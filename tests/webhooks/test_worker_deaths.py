"""A receipt whose handler kills its worker: each run is on record before
its handlers start, so the drains take it after the others, and once its
runs (those that died with those that raised) are used up, MAX_RETRIES + 1,
it ends failed instead of killing one worker after another.
``SimulatedCrash`` kills the run as SIGKILL would: nothing catches it,
nothing records a failure."""

import re
import threading
from contextlib import suppress
from datetime import timedelta

import pytest
from django.db import connections

from idempotency.shared import clock
from idempotency.shared.steps.models import UnitRecord
from idempotency.shared.testing.clock import controlled_clock
from idempotency.shared.testing.crashes import SimulatedCrash
from idempotency.shared.units import WEBHOOKS, Unit
from webhooks import processing, tasks
from webhooks.conf import webhooks_settings
from webhooks.exceptions import HandlerFailed, WorkerDied
from webhooks.handlers import on
from webhooks.models import WebhookReceipt
from webhooks.querysets import WebhookReceiptQuerySet

pytestmark = pytest.mark.django_db(transaction=True)

# Longer than any lease a plain run takes (RETRY_BACKOFF_MAX).
PAST_ANY_LEASE = timedelta(minutes=11)


@pytest.fixture
def runs():
    """The delivery ids the handler ran for; it dies while ``dying`` holds
    them, and raises while ``raising`` does."""
    ran, dying, raising = [], set(), set()

    @on("github", "push")
    @on("stripe", "push")
    def handle(event):
        ran.append(event.delivery_id)
        if event.delivery_id in dying:
            raise SimulatedCrash(f"killed while handling {event.delivery_id}")
        if event.delivery_id in raising:
            raise RuntimeError("downstream is down")

    return ran, dying, raising


def _received(delivery_id, offset=0, source="github") -> int:
    return WebhookReceipt.objects.create(
        source=source,
        delivery_id=delivery_id,
        event_type="push",
        body=b"{}",
        headers={"Content-Type": "application/json"},
        received_at=clock.now() + timedelta(seconds=offset),
    ).pk


@pytest.mark.parametrize("other_source", ["github", "stripe"])
def test_a_receipt_whose_worker_died_waits_behind_the_others(runs, other_source):
    ran, dying, _ = runs
    poison = _received("poison")
    _received("other", offset=1, source=other_source)
    dying.add("poison")
    with controlled_clock() as control:
        with suppress(SimulatedCrash):
            processing.process_next()
        receipt = WebhookReceipt.objects.get(pk=poison)
        assert (receipt.state, receipt.attempts) == ("received", 0)
        assert receipt.locked_until is not None  # its run, on record

        control.advance(PAST_ANY_LEASE)
        dying.clear()  # the worker that dies next is not this test's point
        # The oldest no longer goes first, in its source's turn or another's:
        # its last run killed its worker.
        assert processing.drain(1, retry=lambda pk: None) == 1
        assert ran == ["poison", "other"]
        assert processing.drain(1, retry=lambda pk: None) == 1

    assert ran == ["poison", "other", "poison"]
    receipt.refresh_from_db()
    assert (receipt.state, receipt.attempts, receipt.worker_deaths) == (
        "processed",
        1,
        0,
    )
    assert receipt.locked_until is None


@pytest.mark.parametrize("path", ["drain", "task"])
def test_a_receipt_that_keeps_killing_its_worker_ends_failed(runs, settings, path):
    settings.WEBHOOKS = {**settings.WEBHOOKS, "MAX_RETRIES": 2}
    ran, dying, _ = runs
    pk = _received("poison")
    dying.add("poison")
    retried = []

    def run():
        if path == "drain":
            return processing.drain(10, retry=retried.append)
        return processing.process(pk)

    with controlled_clock() as control:
        for _ in range(3):  # the first run and its two retries
            with suppress(SimulatedCrash):
                run()
            control.advance(PAST_ANY_LEASE)
        if path == "drain":
            assert run() == 1  # it ran nothing, and went on
        else:
            with pytest.raises(WorkerDied):
                run()

    assert ran == ["poison"] * 3
    assert retried == []  # it would kill its worker again
    receipt = WebhookReceipt.objects.get(pk=pk)
    assert receipt.state == "failed"
    assert "its handler's worker died 3 times" in receipt.last_error
    assert (receipt.attempts, receipt.worker_deaths, receipt.locked_until) == (
        3,
        0,
        None,
    )


@pytest.mark.parametrize(
    ("last", "error", "counted"),
    [
        # Its deaths count in attempts once they failed it.
        ("dies", "its handler's worker died 2 times", (3, 0)),
        # The death before stays counted for a run that raised.
        ("raises", "downstream is down", (2, 1)),
    ],
)
def test_deaths_and_raised_failures_use_up_one_budget_of_runs(
    settings, last, error, counted
):
    # MAX_RETRIES = 2: three runs in all, whichever way each ends. The
    # process_receipt task counts the runs that raised (its retries, run at
    # once here); a dead worker's message comes back at the same retry, as
    # the broker redelivers it, and the receipt counts that death.
    settings.WEBHOOKS = {**settings.WEBHOOKS, "MAX_RETRIES": 2}
    pk = _received("flaky")
    ends = iter(["dies", "raises", last, "dies"])
    raised = []

    @on("github", "push")
    def handle(event):
        if next(ends) == "dies":
            raise SimulatedCrash("killed")
        raised.append(event.delivery_id)
        raise RuntimeError("downstream is down")

    with controlled_clock() as control:
        while True:
            try:
                result = tasks.process_receipt.apply((pk,), retries=len(raised))
                break
            except SimulatedCrash:
                control.advance(PAST_ANY_LEASE)  # its message comes back

    assert next(ends) == "dies"  # three ran, the fourth never did
    assert result.failed()
    receipt = WebhookReceipt.objects.get(pk=pk)
    assert error in receipt.last_error
    assert (receipt.state, receipt.locked_until) == ("failed", None)
    assert (receipt.attempts, receipt.worker_deaths) == counted


def test_a_drain_retries_no_receipt_whose_deaths_used_its_runs_up(runs, settings):
    settings.WEBHOOKS = {**settings.WEBHOOKS, "MAX_RETRIES": 1}
    ran, dying, raising = runs
    pk = _received("flaky")
    dying.add("flaky")
    retried = []
    with controlled_clock() as control:
        with suppress(SimulatedCrash):
            processing.drain(10, retry=retried.append)
        control.advance(PAST_ANY_LEASE)
        dying.clear()
        raising.add("flaky")
        assert processing.drain(10, retry=retried.append) == 1

    assert ran == ["flaky"] * 2  # a death and a raise: its two runs
    assert retried == []
    assert WebhookReceipt.objects.get(pk=pk).state == "failed"


def test_a_redelivery_gives_a_failed_receipt_its_runs_again(runs, settings):
    settings.WEBHOOKS = {**settings.WEBHOOKS, "MAX_RETRIES": 1}
    ran, dying, raising = runs
    pk = _received("flaky")
    dying.add("flaky")
    with controlled_clock() as control:
        with suppress(SimulatedCrash):
            processing.process(pk)
        control.advance(PAST_ANY_LEASE)
        dying.clear()
        raising.add("flaky")
        with pytest.raises(HandlerFailed) as failed:
            processing.process(pk)
        assert failed.value.last_attempt  # a death and a raise: two runs

        assert WebhookReceipt.objects.reopen_failed(pk)  # the provider resends it
        raising.clear()
        dying.add("flaky")
        with suppress(SimulatedCrash):
            processing.process(pk)
        control.advance(PAST_ANY_LEASE)
        dying.clear()
        assert processing.process(pk) == processing.Outcome.PROCESSED

    assert ran == ["flaky"] * 4


def _in_another_worker(work):
    """What ``work()`` returns, run by another worker (thread and connection)."""
    done = []

    def worker():
        try:
            done.append(work())
        finally:
            connections.close_all()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(10)
    return done[0] if done else None


@pytest.fixture
def failed_signals():
    sent = []
    processing.signals.delivery_failed.connect(
        lambda **kwargs: sent.append(kwargs["receipt_id"]),
        weak=False,
        dispatch_uid="deaths-test",
    )
    yield sent
    processing.signals.delivery_failed.disconnect(dispatch_uid="deaths-test")


@pytest.mark.postgresql
@pytest.mark.parametrize("path", ["drain", "task"])
def test_a_run_that_outlived_its_lease_and_raised_records_its_failure(
    monkeypatch, failed_signals, path
):
    # A plain handler runs under the row lock, which keeps the other workers
    # off however long it runs. This one outlived its 1 s lease and raised;
    # the rollback lets the lock go before its failure is written. A drain in
    # that moment took the lapsed lease for a dead worker's, ran the receipt
    # again and fenced the failure out (its error, its signal); the run now
    # renews its lease under the lock first.
    pk = _received("slow")
    ran, drained = [], []
    record_failure = WebhookReceiptQuerySet.record_failure

    def after_a_drain(self, *args, **kwargs):
        if not drained:
            drained.append(
                _in_another_worker(lambda: processing.drain(10, lambda pk: None))
            )
        return record_failure(self, *args, **kwargs)

    monkeypatch.setattr(WebhookReceiptQuerySet, "record_failure", after_a_drain)
    retried = []
    with controlled_clock() as control:

        @on("github", "push")
        def slow(event):
            ran.append(event.delivery_id)
            if len(ran) == 1:
                control.advance(seconds=2)  # past its lease
                raise RuntimeError("downstream is down")

        if path == "drain":
            assert processing.drain(1, retry=retried.append) == 1
        else:
            with pytest.raises(HandlerFailed):
                processing.process(pk)

    assert drained == [0]  # the other drain left it alone
    assert ran == ["slow"]
    receipt = WebhookReceipt.objects.get(pk=pk)
    assert receipt.state == "failed"
    assert "downstream is down" in receipt.last_error
    assert (receipt.attempts, receipt.worker_deaths, receipt.locked_until) == (
        1,
        0,
        None,
    )
    assert failed_signals == [pk]
    assert retried == ([pk] if path == "drain" else [])


@pytest.mark.postgresql
def test_a_run_whose_lapsed_lease_another_took_before_its_lock_writes_nothing(
    monkeypatch, failed_signals
):
    # Between its lease's commit and its row lock the run stalled past the
    # lease; another worker took the receipt as a dead worker's and ran it.
    pk = _received("stalled")
    ran = []

    @on("github", "push")
    def handle(event):
        ran.append(event.delivery_id)
        raise RuntimeError("downstream is down")

    lock_leased = WebhookReceiptQuerySet.lock_leased

    def take_over():
        with suppress(HandlerFailed):
            processing.process(pk)

    with controlled_clock() as control:

        def after_a_takeover(self, *args):
            if threading.current_thread() is threading.main_thread() and not ran:
                control.advance(seconds=2)
                _in_another_worker(take_over)
            return lock_leased(self, *args)

        monkeypatch.setattr(WebhookReceiptQuerySet, "lock_leased", after_a_takeover)
        assert processing.process(pk) == processing.Outcome.LEASED

    assert ran == ["stalled"]  # the other worker's run only
    receipt = WebhookReceipt.objects.get(pk=pk)
    # The other run's failure, as it recorded it: the death it counted stays.
    assert (receipt.state, receipt.attempts, receipt.worker_deaths) == (
        "failed",
        1,
        1,
    )
    assert failed_signals == [pk]


undone: list[tuple[str, str]] = []


def undo(key, result):
    undone.append((result, key))


@pytest.mark.parametrize("path", ["drain", "task"])
def test_a_steps_receipt_that_keeps_killing_its_worker_gives_its_unit_up(
    settings, path
):
    # As a last attempt that raises: the completed steps' undos run, once
    # each, the last recovery point first, each with its step's undo key.
    settings.WEBHOOKS = {**settings.WEBHOOKS, "MAX_RETRIES": 1}
    undone.clear()

    @on("github", "push", steps=True)
    def book(event):
        event.step("charge", lambda key: "charge", undo=undo)
        event.step("reserve", lambda key: "reserve", undo=undo)
        raise SimulatedCrash("killed after its steps")

    pk = _received("poison")

    def run():
        if path == "drain":
            return processing.drain(10, retry=lambda pk: None)
        return processing.process(pk)

    with controlled_clock() as control:
        for _ in range(2):  # the first run and its retry
            with suppress(SimulatedCrash):
                run()
            control.advance(webhooks_settings.STEPS_LEASE + timedelta(seconds=1))
        with suppress(WorkerDied):
            run()

    unit = Unit(WEBHOOKS, ("github", "poison"))
    assert undone == [
        ("reserve", unit.derive("undo:reserve")),
        ("charge", unit.derive("undo:charge")),
    ]
    assert UnitRecord.objects.get().state == UnitRecord.State.COMPENSATED
    receipt = WebhookReceipt.objects.get(pk=pk)
    assert receipt.state == "failed"
    assert "its handler's worker died 2 times" in receipt.last_error
    assert receipt.locked_until is None


def test_the_console_shows_a_receipts_worker_deaths(client, make_user):
    pk = _received("poison")
    WebhookReceipt.objects.filter(pk=pk).update(worker_deaths=2)
    client.force_login(make_user("operator", is_superuser=True, is_staff=True))

    page = client.get(f"/admin/webhooks/webhookreceipt/{pk}/change/")

    # Its own row (Django 6 puts the help text between label and value).
    row = re.search(
        rb'field-worker_deaths".*?<div class="readonly">(.*?)<', page.content, re.S
    )
    assert row is not None and row.group(1) == b"2"
