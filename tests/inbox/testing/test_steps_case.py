"""The proof kit's steps case: a steps consumer killed right after each of its
steps, then redelivered, makes each outside effect once; one that calls the
mailer outside ``delivery.step()`` is caught."""

import itertools

import pytest

from inbox.api import consumer
from inbox.testing import consumers
from inbox.testing.consumers import Consumer
from inbox.testing.suites import ConsumerSuite
from tests.testapp import services
from tests.testing import broken
from tests.testing.helpers import broken_message

pytestmark = pytest.mark.django_db(transaction=True)
_payments = itertools.count(1)


@pytest.fixture(autouse=True)
def _fakes(fakes):
    """The fake services run for every test here (tests/conftest.py)."""


@consumer("kit.ship-and-mail", steps=True)
def ship_and_mail(delivery, *, payload, **kwargs):
    booking = delivery.step(
        "ship", lambda key: services.book_shipment(key, payload["payment"])
    )
    delivery.step("mail", lambda key: services.send_mail(payload["email"], "Sent"))
    delivery.step("note", lambda key: booking["id"])


@consumer("kit.ship", steps=True)
def ship(delivery, *, payload, **kwargs):
    delivery.step("ship", lambda key: services.book_shipment(key, payload["payment"]))


def payment():
    return {"payment": next(_payments), "email": "buyer@example.com"}


def effects_of(fakes):
    def effects():
        return {name: fakes.effects.count(name) for name in ("shipment", "mail")}

    return effects


def test_the_case_holds_for_a_consumer_whose_outside_calls_are_steps(fakes):
    consumers.check_crash_after_each_step(
        Consumer(ship_and_mail, "payment.captured", payment, effects_of(fakes))
    )


def test_the_case_catches_a_consumer_that_mails_outside_its_steps(fakes):
    consumer = Consumer(
        broken.mails_outside_steps, "payment.captured", payment, effects_of(fakes)
    )
    consumers.check_redelivery(consumer)  # a plain redelivery looks fine

    message = broken_message(consumers.check_crash_after_each_step, consumer)

    assert message.startswith(
        "Guarantee broken: a steps consumer killed right after any of its steps "
        "runs each step's effect once in the end"
    )
    assert "the consumer's steps: ship, note" in message
    assert (
        "killed right after step 'note', then redelivered: mail: the effect was "
        "applied twice" in message
    )
    assert "shipment:" not in message  # the carrier's step held


def test_the_case_cannot_run_on_a_consumer_without_steps(fakes):
    @consumer("kit.no-steps")
    def no_steps(*, payload, **kwargs):
        services.send_mail(payload["email"], "Sent")

    with pytest.raises(AssertionError, match="the consumer ran no step"):
        consumers.check_crash_after_each_step(
            Consumer(no_steps, "payment.captured", payment, effects_of(fakes))
        )


class TestShipSuite(ConsumerSuite):
    """Every case of the suite, the steps one included, on a steps consumer
    whose one outside call carries its key."""

    consumer = ship
    event_type = "payment.captured"
    # The carrier takes no cancellation here: a booking stays when the unit
    # gives up (tests/testing/test_compensations.py proves undos).
    kept_steps = ("ship",)

    def payload(self):
        return payment()

    def effects(self):
        return len(self.fakes.effects.made["shipment"])

    @pytest.fixture(autouse=True)
    def _fakes(self, fakes):
        self.fakes = fakes


class TestShipSuiteCountedPerEffect(TestShipSuite):
    """The same, with one count per outside effect."""

    def effects(self):
        return effects_of(self.fakes)()
