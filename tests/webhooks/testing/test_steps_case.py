"""The proof kit on steps handlers: killed right after each of its steps,
then redelivered, a sound one makes each outside effect once and one that
mails outside ``event.step()`` is caught; the crash case waits out the dead
worker's lease before the redelivery, as a broker's would come."""

import uuid

import pytest

from idempotency.shared.testing.guarantees import CannotCheck
from tests.testapp import services
from tests.testing.helpers import broken_message
from webhooks import handlers
from webhooks.testing import deliveries
from webhooks.testing.deliveries import Webhook
from webhooks.testing.suites import WebhookSuite

pytestmark = pytest.mark.django_db(transaction=True)

SOURCE = "kit-steps"
SOURCES = {SOURCE: {"VERIFIER": "hmac", "SECRETS": ["kit-steps-0123456789"]}}


@pytest.fixture(autouse=True)
def _sources(settings, fakes):
    """This module's webhook source, and the fake services (tests/conftest.py)."""
    settings.WEBHOOKS = {"SOURCES": SOURCES}


def ship_and_mail(event):
    payment = event.data["payment"]
    booking = event.step("ship", lambda key: services.book_shipment(key, payment))
    event.step("mail", lambda key: services.send_mail("buyer@example.com", "Sent"))
    event.step("note", lambda key: booking["id"])


def ship(event):
    payment = event.data["payment"]
    booking = event.step("ship", lambda key: services.book_shipment(key, payment))
    event.step("note", lambda key: booking["id"])


def mails_outside_steps(event):
    """Books with a step, then mails outside any: when a crash comes after a
    later step, the redelivery resumes past the steps and mails again."""
    booking = event.step("ship", lambda key: services.book_shipment(key, 1))
    services.send_mail("buyer@example.com", "Your receipt")
    event.step("note", lambda key: booking["id"])


def payments(fakes, handler, *, event_type="payment.captured", steps=True):
    handlers.on(SOURCE, event_type, steps=steps)(handler)
    return Webhook(
        source=SOURCE,
        event_type=event_type,
        body=lambda: {"payment": uuid.uuid4().int % 10**9},
        effects=lambda: fake_effects(fakes),
    )


def fake_effects(fakes):
    return {name: fakes.effects.count(name) for name in ("shipment", "mail")}


def test_the_case_holds_for_a_handler_whose_outside_calls_are_steps(fakes):
    deliveries.check_webhook_crash_after_each_step(payments(fakes, ship_and_mail))


def test_the_case_catches_a_handler_that_mails_outside_its_steps(fakes):
    webhook = payments(fakes, mails_outside_steps)
    deliveries.check_webhook_redelivery(webhook)  # a plain redelivery looks fine

    message = broken_message(deliveries.check_webhook_crash_after_each_step, webhook)

    assert message.startswith(
        "Guarantee broken: a steps handler killed right after any of its steps "
        "runs each step's effect once in the end"
    )
    assert "kit-steps payment.captured; its steps: ship, note" in message
    assert (
        "killed right after step 'note', then redelivered: mail: the effect was "
        "applied twice" in message
    )
    assert "shipment:" not in message  # the carrier's step held


def test_the_case_cannot_run_on_a_handler_without_steps(fakes):
    webhook = payments(fakes, lambda event: None, steps=False)

    with pytest.raises(CannotCheck, match="steps=True"):
        deliveries.check_webhook_crash_after_each_step(webhook)


def test_the_case_cannot_run_on_a_steps_handler_that_takes_no_step(fakes):
    def ships_outside_steps(event):
        services.book_shipment(f"ship-{event.delivery_id}", event.data["payment"])

    webhook = payments(fakes, ships_outside_steps)

    with pytest.raises(CannotCheck, match="ran no step"):
        deliveries.check_webhook_crash_after_each_step(webhook)


def test_the_crash_case_waits_out_a_dead_steps_handlers_lease(fakes):
    # Redelivered under the dead worker's live lease, the receipt would be
    # left for later and its effect reported lost.
    deliveries.check_webhook_crash(payments(fakes, ship))


class TestShipmentsWebhook(WebhookSuite):
    """The suite collects the steps case for a steps handler."""

    source = SOURCE
    event_type = "shipment.wanted"
    test_an_older_event_arriving_late_is_ignored = None
    test_a_newer_event_arriving_after_an_older_one_is_applied = None
    # The carrier takes no cancellation here: a booking stays when the unit
    # gives up (tests/testing/test_compensations.py proves undos).
    kept_steps = ("ship",)

    @pytest.fixture(autouse=True)
    def _handler(self, fakes):
        handlers.on(SOURCE, self.event_type, steps=True)(ship)
        self.fakes = fakes

    def body(self):
        return {"payment": uuid.uuid4().int % 10**9}

    def effects(self):
        return fake_effects(self.fakes)
