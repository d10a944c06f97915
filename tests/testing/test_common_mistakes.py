"""Mistakes teams make with keys, consumers and webhook handlers that the kit
caught already and had no test of their own: each broken subject must fail
its suite's case with a report that names the mistake. And one that looks
like a mistake and is not: an answer holding the time it ran."""

import uuid

import pytest

from idempotency.testing import endpoints
from idempotency.testing.endpoints import Endpoint
from inbox.testing import consumers
from inbox.testing.consumers import Consumer
from tests.testing import broken
from tests.testing.helpers import broken_message, new_widget, widget_count
from tests.webhooks.conftest import handler_registry  # noqa: F401 (a fixture)
from webhooks import handlers
from webhooks.testing import deliveries
from webhooks.testing.deliveries import Webhook

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.testing.urls"),
]

SOURCE = "kit-mistakes"
SOURCES = {SOURCE: {"VERIFIER": "hmac", "SECRETS": ["kit-mistakes-0123456789"]}}
STRAIGHT = "task broken.ship_widget sent straight to the broker"


@pytest.fixture(autouse=True)
def _sources(settings, fakes):
    """This module's webhook source, and the fake services (tests/conftest.py)."""
    settings.WEBHOOKS = {"SOURCES": SOURCES}


def widgets(url) -> Endpoint:
    return Endpoint(url=url, payload=new_widget, effects=widget_count)


@pytest.mark.parametrize("check", endpoints.ENDPOINT_CHECKS, ids=lambda c: c.__name__)
def test_an_answer_holding_the_time_it_ran_is_no_mistake(check):
    """The replay is the stored answer, not a new one: a time in the body
    replays as it was first sent."""
    check(widgets("/sound/stamped-widget/"))


def test_a_view_sending_a_task_at_once_is_reported():
    message = broken_message(
        endpoints.check_crash_after_commit, widgets("/broken/ships-by-task-at-once/")
    )

    assert STRAIGHT in message
    assert "cannot commit with the view's work: record() an outbox event" in message


@pytest.mark.parametrize(
    "check",
    [endpoints.check_failed_attempt, endpoints.check_failure_at_completion],
    ids=lambda c: c.__name__,
)
def test_a_view_charging_under_a_key_per_attempt_is_reported(check, fakes):
    endpoint = Endpoint(
        url="/broken/charges-under-a-new-key/",
        payload=new_widget,
        effects=lambda: {"charges": fakes.effects.count("charge")},
    )

    message = broken_message(check, endpoint)

    assert "the failed attempt left its effect" in message
    assert "charges: the effect was applied twice" in message


@pytest.mark.parametrize(
    "check",
    [consumers.check_crash_before_ack, consumers.check_crash_anywhere],
    ids=lambda c: c.__name__,
)
def test_a_consumer_sending_a_task_on_commit_is_reported(check):
    consumer = Consumer(
        broken.ships_by_task_on_commit, "widget.wanted", new_widget, widget_count
    )

    message = broken_message(check, consumer)

    assert STRAIGHT in message
    assert "cannot commit with the inbox row: record() an outbox event" in message


def test_a_consumer_charging_under_a_key_per_call_is_reported(fakes):
    consumer = Consumer(
        broken.charges_under_a_new_key,
        "widget.wanted",
        new_widget,
        lambda: {"charges": fakes.effects.count("charge")},
    )

    message = broken_message(consumers.check_crash_anywhere, consumer)

    assert "died just before durable point 1: COMMIT of" in message
    assert "charges: the effect was applied twice" in message


@pytest.mark.usefixtures("handler_registry")
def test_a_handler_sending_a_task_on_commit_is_reported():
    handlers.on(SOURCE, "widget.wanted")(broken.ships_the_widget_by_task_on_commit)
    webhook = Webhook(
        source=SOURCE,
        event_type="widget.wanted",
        body=lambda: {"wanted": uuid.uuid4().hex},
        effects=widget_count,
    )

    message = broken_message(deliveries.check_webhook_crash, webhook)

    assert STRAIGHT in message
    assert "cannot commit with the handler's change: record() an outbox" in message
