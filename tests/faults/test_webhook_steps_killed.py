"""A worker running a webhook's steps handler dies of SIGKILL at every step
boundary: the provider's redelivered task takes the receipt over once its
lease lapses and resumes at the first unfinished step.

The handler (``tests.faults.worker.charge_release``) charges the fake
provider with its step's key, then writes a widget in an atomic step. The
provider counts one charge a key, so a charge made and not yet recorded
("call:charge") is asked for again under the same key and made once.
"""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from idempotency.shared.steps.models import StepRecord, UnitRecord
from tests.fakes import fake_services
from tests.testapp.crashes import CRASH_AT, CRASH_ONCE
from tests.testapp.models import Widget
from webhooks.models import WebhookReceipt

from .processes import celery_worker, send_task, wait_until

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

SETTINGS = "tests.faults.steps_settings"
BUSY_SETTINGS = "tests.faults.busy_steps_settings"


@pytest.fixture
def receipt_id(intake):
    """One release delivery, received and stored by the intake."""
    return intake("release-1", event="release")


@pytest.mark.parametrize(
    ("crash_at", "charge_calls"),
    [
        ("before:charge", 1),
        # Charged, its recovery point not stored: asked again, same key.
        ("call:charge", 2),
        ("after:charge", 1),
        # The widget's INSERT ran in the step's transaction, which died open.
        ("call:widget", 1),
        # Every step recorded; the receipt was not marked processed.
        ("after:widget", 1),
    ],
)
def test_a_steps_handler_killed_at_a_step_boundary_makes_each_effect_once(
    receipt_id, tmp_path, crash_at, charge_calls
):
    marker = tmp_path / "crashed"
    queue = f"faults-webhook-steps-{uuid.uuid4().hex[:8]}"
    task = "webhooks.process_receipt"
    with fake_services() as fakes:
        env = {**fakes.env(), CRASH_AT: crash_at, CRASH_ONCE: str(marker)}
        # solo: the handler runs in the worker's own process, so the worker
        # dies with it and the task's message stays unacked in Redis.
        with celery_worker(queue, settings=SETTINGS, **env) as worker:
            send_task(task, queue=queue, args=[receipt_id])
            assert worker.wait_exit() == -9
        assert marker.exists()
        receipt = WebhookReceipt.objects.get()
        assert receipt.state == WebhookReceipt.State.RECEIVED
        assert receipt.locked_until is not None  # the dead worker's lease

        # Redis gives the unacked message to the next worker; the receipt
        # answers "leased" until the dead worker's lease lapses, then runs.
        with celery_worker(queue, settings=SETTINGS, **env) as worker:

            def processed():
                receipt.refresh_from_db()
                return receipt.state == WebhookReceipt.State.PROCESSED

            wait_until(processed, "the receipt was not processed", worker=worker)

        assert fakes.effects.count("charge") == 1
        assert fakes.effects.calls["charge"] == charge_calls
    assert Widget.objects.count() == 1
    assert receipt.locked_until is None
    unit = UnitRecord.objects.get()
    assert unit.state == UnitRecord.State.DONE
    steps = StepRecord.objects.filter(unit=unit).order_by("created_at")
    assert [(step.name, step.state) for step in steps] == [
        ("charge", "done"),
        ("widget", "done"),
    ]


def test_a_copy_held_off_by_a_live_lease_keeps_its_retries(intake, tmp_path):
    # Another worker holds the receipt's steps until this copy came back
    # twice (a lease of its own each time). Each return counted as a retry,
    # so once the lease lapsed the copy's first real run was its last: one
    # failure, and the unit was given up and the receipt failed.
    receipt_id = intake("deploy-1", event="deployment")
    # Live until then: a lease of a few seconds could lapse before a loaded
    # machine's worker had started and tried twice.
    receipt = WebhookReceipt.objects.filter(pk=receipt_id)
    receipt.update(locked_until=timezone.now() + timedelta(minutes=5))
    queue = f"faults-webhook-busy-{uuid.uuid4().hex[:8]}"
    env = {"FAULTS_FAIL_ONCE": str(tmp_path / "failed")}
    with celery_worker(queue, settings=BUSY_SETTINGS, **env) as worker:
        send_task("webhooks.process_receipt", queue=queue, args=[receipt_id])
        wait_until(
            lambda: worker.log().count("comes back") >= 2,
            "the copy did not come back twice",
            worker=worker,
        )
        receipt.update(locked_until=timezone.now())  # the holder died: lapsed

        def processed():
            return WebhookReceipt.objects.get(pk=receipt_id).state == "processed"

        # Without its retries, the copy's failure gave the unit up instead.
        wait_until(processed, "the receipt was not processed", worker=worker)
        assert worker.log().count("comes back") >= 2

    assert (tmp_path / "failed").exists()  # its first real run failed
    assert UnitRecord.objects.get().state == UnitRecord.State.DONE
    assert Widget.objects.count() == 1
