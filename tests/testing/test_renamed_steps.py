"""A step whose name changes from one attempt to the next (a time in it):
the retry cannot find the step's recovery point and runs it again under
another derived key. Each suite's crash-after-each-step case says so, not
only that an effect was doubled."""

import uuid

import pytest

from idempotency.testing import endpoints
from idempotency.testing.endpoints import Endpoint
from inbox.testing import consumers
from inbox.testing.consumers import Consumer
from tests.testing import broken
from tests.testing.helpers import broken_message
from tests.webhooks.conftest import handler_registry  # noqa: F401 (a fixture)
from webhooks import handlers
from webhooks.testing import deliveries
from webhooks.testing.deliveries import Webhook

pytestmark = pytest.mark.django_db(transaction=True)

SOURCE = "kit-renamed"
SOURCES = {SOURCE: {"VERIFIER": "hmac", "SECRETS": ["kit-renamed-0123456789"]}}
NAMES = "a step's name must be the same on every attempt"


@pytest.fixture(autouse=True)
def _sources(settings, fakes):
    """This module's webhook source, and the fake services (tests/conftest.py)."""
    settings.WEBHOOKS = {"SOURCES": SOURCES}


def charges(fakes):
    return {"charge": fakes.effects.count("charge")}


def assert_names_the_renamed_step(message):
    assert "killed right after step 'charge-" in message
    assert "charge: the effect was applied twice" in message
    assert "the retry ran its steps again under other names ('charge-" in message
    assert NAMES in message
    assert "(no time, random value or counter in it)" in message


@pytest.mark.urls("tests.testing.urls")
def test_a_view_renaming_its_step_on_each_attempt_is_told_so(fakes):
    endpoint = Endpoint(
        url="/broken/timed-step/",
        payload={"amount": 500},
        effects=lambda: charges(fakes),
    )

    message = broken_message(endpoints.check_crash_after_each_step, endpoint)

    assert_names_the_renamed_step(message)


def test_a_consumer_renaming_its_step_on_each_attempt_is_told_so(fakes):
    consumer = Consumer(
        broken.charges_under_a_timed_step,
        "order.paid",
        {"amount": 500},
        lambda: charges(fakes),
    )

    message = broken_message(consumers.check_crash_after_each_step, consumer)

    assert_names_the_renamed_step(message)


@pytest.mark.usefixtures("handler_registry")
def test_a_handler_renaming_its_step_on_each_attempt_is_told_so(fakes):
    handlers.on(SOURCE, "payment.captured", steps=True)(
        broken.charges_under_a_timed_step_handler
    )
    webhook = Webhook(
        source=SOURCE,
        event_type="payment.captured",
        body=lambda: {"payment": uuid.uuid4().hex},
        effects=lambda: charges(fakes),
    )

    message = broken_message(deliveries.check_webhook_crash_after_each_step, webhook)

    assert_names_the_renamed_step(message)


def test_a_stable_name_is_not_blamed(fakes):
    message = broken_message(
        consumers.check_crash_after_each_step,
        Consumer(
            broken.mails_outside_steps,
            "order.paid",
            {"email": "buyer@example.com"},
            lambda: {"mail": fakes.effects.count("mail")},
        ),
    )

    assert "mail: the effect was applied twice" in message
    assert NAMES not in message
