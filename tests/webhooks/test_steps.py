"""Steps handlers: a receipt leased to one worker, its steps resumed on
reprocess, its unit compensated when it gives up."""

from contextlib import suppress
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from idempotency.shared import clock
from idempotency.shared.steps import Abandon
from idempotency.shared.steps.models import UnitRecord
from idempotency.shared.testing.clock import controlled_clock
from idempotency.shared.testing.crashes import SimulatedCrash
from idempotency.shared.testing.steps import step_kills
from webhooks import processing
from webhooks.conf import webhooks_settings
from webhooks.exceptions import HandlerFailed
from webhooks.handlers import on
from webhooks.models import WebhookReceipt

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


def test_the_last_attempt_that_fails_gives_the_unit_up(steps_handler):
    receipt = new_receipt()
    behaviour["fail"] = True
    with pytest.raises(HandlerFailed):
        processing.process(receipt.pk, last_attempt=True)

    assert calls == ["charge", "undo charge"]
    assert UnitRecord.objects.get().state == UnitRecord.State.COMPENSATED


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
