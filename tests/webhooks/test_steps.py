"""Steps handlers: a receipt leased to one worker, its steps resumed on
reprocess, its unit compensated when it gives up."""

from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from idempotency.shared import clock, retention
from idempotency.shared.steps import Abandon, StepTakenOver
from idempotency.shared.steps.models import UnitRecord
from idempotency.shared.testing.clock import controlled_clock
from idempotency.shared.testing.crashes import SimulatedCrash
from idempotency.shared.testing.steps import step_kills
from tests.parallel import on_threads, together
from webhooks import processing, tasks
from webhooks.conf import webhooks_settings
from webhooks.exceptions import HandlerFailed
from webhooks.handlers import on
from webhooks.models import WebhookReceipt
from webhooks.querysets import WebhookReceiptQuerySet

from .test_processing import deliver

pytestmark = pytest.mark.django_db(transaction=True)

calls: list[str] = []
behaviour = {"abandon": False, "fail": False}


@pytest.fixture(autouse=True)
def _reset():
    calls.clear()
    behaviour.update(abandon=False, fail=False)


def called(name):
    def fn(key):
        calls.append(name)
        return {"step": name}

    return fn


def undo_step(key, result):
    calls.append(f"undo {result['step']}")


@pytest.fixture
def steps_handler():
    @on("github", "push", steps=True)
    def ship(event):
        event.step("charge", called("charge"), undo=undo_step)
        if behaviour["abandon"]:
            raise Abandon("cancelled")
        if behaviour["fail"]:
            raise RuntimeError("the carrier is down")
        event.step("ship", called("ship"))

    return ship


def new_receipt(delivery_id="evt_1"):
    return WebhookReceipt.objects.create(
        source="github",
        delivery_id=delivery_id,
        event_type="push",
        headers={"Content-Type": "application/json"},
        body=b"{}",
        received_at=clock.now(),
    )


def test_a_reprocess_after_a_crash_resumes_at_the_first_unfinished_step(
    steps_handler,
):
    receipt = new_receipt()
    with step_kills(kill_after=1), suppress(SimulatedCrash):
        processing.process(receipt.pk)
    assert calls == ["charge"]

    # Under the dead worker's live lease, a retry neither runs nor drops it.
    assert processing.process(receipt.pk) == processing.Outcome.LEASED
    assert processing.process_next() is None
    with controlled_clock() as moved:
        moved.advance(webhooks_settings.STEPS_LEASE + timedelta(seconds=1))
        assert processing.process(receipt.pk) == processing.Outcome.PROCESSED

    assert calls == ["charge", "ship"]
    receipt.refresh_from_db()
    assert (receipt.state, receipt.locked_until) == ("processed", None)
    assert UnitRecord.objects.get().state == UnitRecord.State.DONE
    assert processing.process(receipt.pk) == processing.Outcome.PROCESSED
    assert calls == ["charge", "ship"]


def test_a_failed_run_is_retried_from_its_first_unfinished_step(steps_handler):
    receipt = new_receipt()
    behaviour["fail"] = True
    with pytest.raises(HandlerFailed):
        processing.process(receipt.pk)
    receipt.refresh_from_db()
    assert (receipt.state, receipt.locked_until) == ("failed", None)

    behaviour["fail"] = False
    assert processing.process(receipt.pk) == processing.Outcome.PROCESSED
    assert calls == ["charge", "ship"]


class StillCalling(BaseException):
    """Stops the newer worker mid-call, its lease live, as if it hung there."""


def times_out():
    raise RuntimeError("the carrier timed out")


@pytest.mark.parametrize("drained", [False, True], ids=["process", "drain"])
@pytest.mark.parametrize(
    "wakes_to",
    [lambda: "shipped", times_out],
    ids=["its-recovery-point-is-fenced-out", "its-call-fails"],
)
def test_a_worker_taken_over_mid_steps_reports_leased_and_writes_nothing(
    clock, wakes_to, drained
):
    runs = []

    @on("github", "push", steps=True)
    def ship(event):
        event.step("charge", called("charge"))

        def hang(key):
            runs.append(key)
            if len(runs) > 1:
                raise StillCalling
            # Past this worker's lease, a newer one takes the receipt over.
            clock.advance(webhooks_settings.STEPS_LEASE + timedelta(seconds=1))
            with pytest.raises(StillCalling):
                processing.process(receipt.pk)
            return wakes_to()

        event.step("ship", hang)

    receipt = new_receipt()
    if drained:
        assert processing.process_next() == receipt.pk
    else:
        assert processing.process(receipt.pk) == processing.Outcome.LEASED

    receipt.refresh_from_db()
    assert receipt.state == "received"
    assert receipt.locked_until > clock.now()  # the newer worker's lease
    assert processing.process(receipt.pk) == processing.Outcome.LEASED


def test_a_last_attempt_taken_over_leaves_the_unit_to_the_newer_worker(clock):
    past_a_lease = webhooks_settings.STEPS_LEASE + timedelta(seconds=1)
    runs = []

    @on("github", "push", steps=True)
    def ship(event):
        event.step("charge", called("charge"), undo=undo_step)

        def hang(key):
            runs.append(key)
            if len(runs) > 1:
                raise StillCalling
            clock.advance(past_a_lease)
            with pytest.raises(StillCalling):
                processing.process(receipt.pk)
            clock.advance(past_a_lease)  # the newer worker is slow too
            return "shipped"

        event.step("ship", hang)

    receipt = new_receipt()
    outcome = processing.process(receipt.pk, last_attempt=True)

    assert outcome == processing.Outcome.LEASED
    assert calls == ["charge"]  # nothing undone
    assert UnitRecord.objects.get().state == UnitRecord.State.RUNNING


def test_a_worker_whose_lapsed_lease_another_took_stops_at_its_renewal(clock):
    @on("github", "push", steps=True)
    def ship(event):
        clock.advance(webhooks_settings.STEPS_LEASE + timedelta(seconds=1))
        # Another worker leases the lapsed receipt; its unit has not begun,
        # so this worker's next recovery point is still stored.
        WebhookReceipt.objects.filter(pk=receipt.pk).update(
            locked_until=clock.now() + webhooks_settings.STEPS_LEASE
        )
        event.step("charge", called("charge"))
        event.step("ship", called("ship"))

    receipt = new_receipt()
    assert processing.process(receipt.pk) == processing.Outcome.LEASED

    assert calls == ["charge"]
    receipt.refresh_from_db()
    assert receipt.state == "received"


def renewals_together(monkeypatch):
    """A steps handler's renewals of its receipt's lease (an update of
    ``locked_until`` alone) held until two have read the lease they fence on."""
    update = WebhookReceiptQuerySet.update
    meeting = together(update)

    def updating(queryset, **values):
        renews = set(values) == {"locked_until"} and values["locked_until"]
        return (meeting if renews else update)(queryset, **values)

    monkeypatch.setattr(WebhookReceiptQuerySet, "update", updating)


# Threads on one row: SQLite locks the whole table instead.
@pytest.mark.postgresql
def test_steps_on_threads_renewing_the_lease_at_once_are_not_taken_over(
    clock, monkeypatch
):
    """The docs let a handler run its steps on worker threads: two recovery
    points stored at once must not find their receipt taken over by each
    other's renewal of its lease."""
    renewals_together(monkeypatch)
    outcomes = []

    @on("github", "push", steps=True)
    def ship(event):
        clock.advance(webhooks_settings.STEPS_LEASE * 0.6)  # a renewal is due
        outcomes.extend(
            on_threads(
                lambda: event.step("charge", called("charge")),
                lambda: event.step("ship", called("ship")),
            )
        )

    receipt = new_receipt()
    assert processing.process(receipt.pk) == processing.Outcome.PROCESSED

    assert not [exc for exc in outcomes if isinstance(exc, Exception)], outcomes
    assert sorted(calls) == ["charge", "ship"]
    assert UnitRecord.objects.get().state == UnitRecord.State.DONE


@pytest.mark.postgresql
def test_steps_on_threads_of_a_worker_whose_lease_another_took_are_all_fenced(
    clock,
):
    outcomes, taken = [], []

    @on("github", "push", steps=True)
    def ship(event):
        clock.advance(webhooks_settings.STEPS_LEASE + timedelta(seconds=1))
        taken.append(clock.now() + webhooks_settings.STEPS_LEASE)
        WebhookReceipt.objects.filter(pk=receipt.pk).update(locked_until=taken[0])
        outcomes.extend(
            on_threads(
                lambda: event.step("charge", called("charge")),
                lambda: event.step("ship", called("ship")),
            )
        )
        raise outcomes[0]

    receipt = new_receipt()
    assert processing.process(receipt.pk) == processing.Outcome.LEASED

    assert [type(outcome) for outcome in outcomes] == [StepTakenOver] * 2
    receipt.refresh_from_db()
    assert receipt.state == "received"
    assert receipt.locked_until == taken[0]  # the newer worker's, left alone


def test_the_drain_runs_steps_handlers_too(steps_handler):
    receipt = new_receipt()
    assert processing.process_next() == receipt.pk
    assert calls == ["charge", "ship"]
    assert WebhookReceipt.objects.get().state == "processed"


def test_abandon_compensates_once_and_finishes_the_receipt(steps_handler):
    receipt = new_receipt()
    behaviour["abandon"] = True
    assert processing.process(receipt.pk) == processing.Outcome.PROCESSED
    assert processing.process(receipt.pk) == processing.Outcome.PROCESSED

    assert calls == ["charge", "undo charge"]
    receipt.refresh_from_db()
    assert receipt.last_error == "abandoned and compensated: cancelled"
    assert UnitRecord.objects.get().state == UnitRecord.State.COMPENSATED


def test_a_retry_after_an_operator_abandoned_the_unit_finishes_it_undone(
    steps_handler, clock, abandon_in_console
):
    receipt = new_receipt()
    behaviour["fail"] = True
    with pytest.raises(HandlerFailed):
        processing.process(receipt.pk)
    clock.advance(webhooks_settings.STEPS_LEASE + timedelta(seconds=1))
    abandon_in_console(UnitRecord.objects.get().pk)
    assert calls == ["charge", "undo charge"]

    behaviour["fail"] = False  # the carrier is back: the work must still not finish
    assert processing.process(receipt.pk) == processing.Outcome.PROCESSED

    assert calls == ["charge", "undo charge"]
    receipt.refresh_from_db()
    assert receipt.state == "processed"
    assert receipt.last_error.startswith("abandoned and compensated: Abandoned by")


def test_an_abandon_reason_a_text_column_refuses_finishes_the_receipt():
    @on("github", "push", steps=True)
    def refuse(event):
        event.step("charge", called("charge"), undo=undo_step)
        raise Abandon("refused: \x00")

    receipt = new_receipt()
    assert processing.process(receipt.pk) == processing.Outcome.PROCESSED

    assert calls == ["charge", "undo charge"]
    receipt.refresh_from_db()
    assert receipt.last_error == "abandoned and compensated: refused: \\x00"
    assert UnitRecord.objects.get().state == UnitRecord.State.COMPENSATED


def test_the_last_attempt_that_fails_gives_the_unit_up(steps_handler):
    receipt = new_receipt()
    behaviour["fail"] = True
    with pytest.raises(HandlerFailed):
        processing.process(receipt.pk, last_attempt=True)

    assert calls == ["charge", "undo charge"]
    assert UnitRecord.objects.get().state == UnitRecord.State.COMPENSATED


def test_a_providers_resend_of_a_receipt_whose_unit_gave_up_runs_no_step(
    steps_handler,
):
    # Why the console sends the operator to a new event, not a resend: the
    # same delivery id is the same unit, given up for good.
    behaviour["fail"] = True
    deliver()  # processed at once: each retry fails, the last gives up
    assert WebhookReceipt.objects.get().state == "failed"
    assert UnitRecord.objects.get().state == UnitRecord.State.COMPENSATED
    behaviour["fail"] = False

    assert deliver().status_code == 202  # the provider resends the failed one
    assert processing.process(WebhookReceipt.objects.get().pk) == "processed"

    assert calls == ["charge", "undo charge"]
    assert WebhookReceipt.objects.get().last_error.startswith(
        "abandoned and compensated: its attempts ran out"
    )


def test_a_providers_resend_after_its_receipt_was_purged_runs_no_step_again(
    steps_handler, clock
):
    # RETENTION (30 days) purges the receipt, UNIT_RETENTION (90) keeps its
    # unit: the resend is a new receipt and its handler runs, but the same
    # delivery id is the same unit, whose steps return their stored results.
    deliver()
    first = WebhookReceipt.objects.get().pk
    assert processing.process(first) == "processed"
    assert calls == ["charge", "ship"]
    clock.advance(webhooks_settings.RETENTION + timedelta(days=1))
    assert retention.purge(only=["webhooks", "units"]) == {"webhooks": 1, "units": 0}

    assert deliver().status_code == 202
    resent = WebhookReceipt.objects.get()
    assert resent.pk != first
    assert processing.process(resent.pk) == "processed"

    assert calls == ["charge", "ship"]
    assert UnitRecord.objects.get().state == UnitRecord.State.DONE


def test_a_drain_that_fails_with_no_retries_left_gives_the_unit_up(
    steps_handler, webhook_sources
):
    # MAX_RETRIES = 0: the drain's run is the receipt's only attempt, as a
    # process_receipt task's first run would be its last.
    webhook_sources.WEBHOOKS = {**webhook_sources.WEBHOOKS, "MAX_RETRIES": 0}
    new_receipt()
    behaviour["fail"] = True
    assert tasks.drain() == 1

    assert calls == ["charge", "undo charge"]
    assert UnitRecord.objects.get().state == UnitRecord.State.COMPENSATED
    assert WebhookReceipt.objects.get().state == "failed"


def test_steps_and_plain_handlers_of_one_event_type_are_refused(steps_handler):
    @on("github", "push")
    def plain(event):
        calls.append("plain")

    receipt = new_receipt()
    with pytest.raises(HandlerFailed) as failed:
        processing.process(receipt.pk)
    assert isinstance(failed.value.__cause__, ImproperlyConfigured)
    assert calls == []


def test_a_step_in_a_plain_handler_is_refused():
    @on("github", "push")
    def plain(event):
        event.step("charge", called("charge"))

    receipt = new_receipt()
    with pytest.raises(HandlerFailed):
        processing.process(receipt.pk)
    assert calls == []


@dataclass
class Ship:
    """A steps handler that is an object that cannot be hashed."""

    carrier: str

    def __call__(self, event):
        event.step("ship", called(self.carrier))


def test_a_steps_handler_that_cannot_be_hashed_runs():
    on("github", "push", steps=True)(Ship("carrier"))
    receipt = new_receipt()
    assert processing.process(receipt.pk) == processing.Outcome.PROCESSED
    assert calls == ["carrier"]


def test_a_worker_that_stalls_before_its_unit_begins_leaves_a_processed_one_alone(
    steps_handler, clock, monkeypatch
):
    """A worker leases the receipt, then stalls past its lease before its
    unit begins; a retry takes it over and processes it. The stalled worker
    must not join the finished unit when it wakes: its last attempt failing
    would then undo the steps of a processed receipt."""
    receipt = new_receipt()
    begin = processing.begin
    stalled = []

    def stalling_begin(*args, **kwargs):
        if not stalled:
            stalled.append(True)
            clock.advance(webhooks_settings.STEPS_LEASE + timedelta(seconds=1))
            assert processing.process(receipt.pk) == processing.Outcome.PROCESSED
            behaviour["fail"] = True  # the stalled worker's run fails
        return begin(*args, **kwargs)

    monkeypatch.setattr(processing, "begin", stalling_begin)

    assert processing.process(receipt.pk, last_attempt=True) == "leased"

    assert calls == ["charge", "ship"]  # nothing undone
    assert UnitRecord.objects.get().state == UnitRecord.State.DONE
    receipt.refresh_from_db()
    assert receipt.state == "processed"


def test_a_handler_is_a_steps_handler_for_all_its_event_types_or_none():
    # The steps flag was kept per handler, not per registration: registered
    # plain for "ping" too, it ran there in no transaction, its writes and
    # the "processed" mark committing apart.
    def both(event):
        calls.append(event.event_type)

    on("github", "push", steps=True)(both)
    with pytest.raises(ImproperlyConfigured, match="steps=True"):
        on("github", "ping")(both)

    def plain(event):
        calls.append(event.event_type)

    on("github", "ping")(plain)
    with pytest.raises(ImproperlyConfigured, match="steps=True"):
        on("github", "push", steps=True)(plain)
    on("github", "issues")(plain)  # plain again: fine


def test_a_retry_whose_handler_calls_no_step_still_finishes_a_given_up_unit(
    clock, abandon_in_console
):
    # An operator abandoned the unit; the retry's handler finds nothing left
    # to do: the receipt ends abandoned, not processed as if it had shipped.
    first_run = []

    @on("github", "push", steps=True)
    def ship(event):
        if first_run:
            return
        first_run.append(True)
        event.step("charge", called("charge"), undo=undo_step)
        raise RuntimeError("the carrier is down")

    receipt = new_receipt()
    with pytest.raises(HandlerFailed):
        processing.process(receipt.pk)
    clock.advance(webhooks_settings.STEPS_LEASE + timedelta(seconds=1))
    abandon_in_console(UnitRecord.objects.get().pk)

    assert processing.process(receipt.pk) == processing.Outcome.PROCESSED
    receipt.refresh_from_db()
    assert receipt.last_error.startswith("abandoned and compensated: Abandoned by")
    assert calls == ["charge", "undo charge"]


# Two threads racing one row's lock: SQLite locks the whole table instead.
@pytest.mark.postgresql
def test_a_stalled_worker_joining_as_a_retry_takes_over_is_the_one_fenced(
    clock, monkeypatch, isolation_level
):
    """A worker leases the receipt and stalls past its lease inside its
    unit's begin, just after it found its lease still its own. A retry takes
    the lapsed lease over and begins meanwhile. The stalled worker must not
    then join the unit over the retry's head: the retry, which holds the
    lease, would be fenced out mid-call (both charging at once). Here the
    retry finds the receipt locked and leaves it busy."""
    import threading

    from tests.stalls import Stall

    outcome = {}
    receipt = new_receipt()

    @on("github", "push", steps=True)
    def ship(event):
        if threading.current_thread() is threading.main_thread():
            stall.joined.set()
            stall.began.wait(10)
            event.step("charge", called("charge by the stalled worker"))
        else:
            stall.began.set()
            stall.joined.wait(10)
            event.step("charge", called("charge by the retry"))

    def retry():
        outcome["retry"] = processing.process(receipt.pk)

    stall = Stall(clock, webhooks_settings.STEPS_LEASE, retry)
    begin = processing.begin

    def stalling_begin(*args, held, **kwargs):
        return begin(*args, held=stall.wrap(held), **kwargs)

    monkeypatch.setattr(processing, "begin", stalling_begin)

    stalled_outcome = processing.process(receipt.pk)
    stall.thread.join(10)

    # One worker ran the handler: the retry waited on the stalled worker's
    # hold (and left the receipt to it), or joined after it and fenced it
    # out before its call. Without the hold, both charged.
    assert len(calls) == 1
    assert "processed" in (stalled_outcome, outcome["retry"])
    receipt.refresh_from_db()
    assert receipt.state == "processed"
    assert UnitRecord.objects.get().state == UnitRecord.State.DONE


@pytest.mark.parametrize("gives_up_by", ["last-attempt", "abandon"])
def test_a_worker_whose_lapsed_lease_another_took_does_not_give_the_unit_up(
    clock, gives_up_by
):
    # Another worker leased the receipt once this one's lease lapsed, and is
    # about to resume the unit (it has not joined it yet). This worker must
    # write nothing more (docs/steps.md): not undo the steps the other
    # resumes after, nor finish the receipt under it.
    receipt = new_receipt()

    @on("github", "push", steps=True)
    def ship(event):
        event.step("charge", called("charge"), undo=undo_step)
        clock.advance(webhooks_settings.STEPS_LEASE + timedelta(seconds=1))
        # What another worker's start does: its own lease on the receipt.
        WebhookReceipt.objects.filter(pk=receipt.pk).update(
            locked_until=clock.now() + webhooks_settings.STEPS_LEASE
        )
        if gives_up_by == "abandon":
            raise Abandon("cancelled")
        raise RuntimeError("the carrier is down")

    outcome = processing.process(receipt.pk, last_attempt=True)

    assert outcome == processing.Outcome.LEASED
    assert calls == ["charge"]  # nothing undone
    assert UnitRecord.objects.get().state == UnitRecord.State.RUNNING
    receipt.refresh_from_db()
    assert receipt.state != "processed"
