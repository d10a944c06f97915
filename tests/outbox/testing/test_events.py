"""capture_events() and check_published_twice() on the test app's order events."""

import uuid
from contextlib import suppress

import pytest
from django.core import mail
from django.db import transaction

from idempotency.shared.testing.guarantees import CannotCheck
from idempotency.shared.testing.messages import call_with_task_kwargs, new_message
from inbox.api import consumer
from outbox import relay
from outbox.api import record
from outbox.publishers.celery import CeleryTaskPublisher
from outbox.testing.events import (
    capture_events,
    check_published_twice,
    check_state_and_event_commit_together,
)
from tests.outbox.testing import broken_producers
from tests.testapp.models import Order, Stock, Widget
from tests.testapp.tasks import reserve_stock
from tests.testing import broken
from tests.testing.helpers import broken_message, new_widget, widget_count

pytestmark = pytest.mark.django_db(transaction=True)
ORDER = {"sku": "BOOK-1", "quantity": 2}


def reserved():
    return sum(Stock.objects.values_list("reserved", flat=True))


def test_an_orders_event_published_twice_reserves_stock_once(api):
    with capture_events() as events:
        assert api.post("/api/orders/", ORDER, key="k").status_code == 201
        api.post("/api/orders/", ORDER, key="k")  # a replay records nothing

    assert [event.event_type for event in events] == ["order.created"]
    assert events[0].headers["once-message-id"] == events[0].id
    check_published_twice(events, {"order.created": reserve_stock}, reserved)


def test_the_once_events_fixture_captures_the_tests_events(api, once_events):
    api.post("/api/orders/", ORDER, key="k")

    check_published_twice(once_events, reserve_stock, reserved)


def test_a_consumer_without_the_inbox_applies_an_event_published_twice(api):
    with capture_events() as events:
        api.post("/api/orders/", {"sku": "BOOK-1", "quantity": 1}, key="k")
    events = [
        type(event)(**{**event.__dict__, "payload": {"name": "from an order"}})
        for event in events
    ]

    message = broken_message(
        check_published_twice, events, broken.without_inbox, widget_count
    )

    assert message.startswith(
        "Guarantee broken: an event the relay publishes twice reaches its consumer "
        "once.\n"
    )
    assert "order.created" in message
    assert "effects went 0 → 2 (expected 0 → 1)" in message


def test_rolled_back_events_are_not_captured():
    with capture_events() as events, suppress(RuntimeError), transaction.atomic():
        record("order", 1, "order.created", ORDER)
        raise RuntimeError("the change fails after its event was recorded")

    assert events == []
    with pytest.raises(CannotCheck, match="no captured event has a consumer"):
        check_published_twice(events, reserve_stock, reserved)


# State and event commit together; events go through the outbox.

BROKEN_URLS = pytest.mark.urls("tests.outbox.testing.broken_producers")


def placing_orders(api):
    """A new order each call, under a fresh key."""
    return lambda: api.post("/api/orders/", ORDER, key=f"k-{uuid.uuid4().hex}")


def sending(api, url):
    return lambda: api.post(url, new_widget(), key=f"k-{uuid.uuid4().hex}")


def test_the_demo_order_and_its_event_commit_together(api):
    check_state_and_event_commit_together(
        placing_orders(api), Order.objects.count, event_types=["order.created"]
    )


@BROKEN_URLS
def test_an_event_recorded_on_commit_is_lost_when_the_process_dies_between(api):
    message = broken_message(
        check_state_and_event_commit_together,
        sending(api, "/broken/event-on-commit/"),
        widget_count,
    )

    assert message.startswith(
        "Guarantee broken: a state change and its event commit together: a unit "
        "of work that dies at any point leaves both or neither.\n"
    )
    # SQLite's claim INSERT is one of the statements listed; PostgreSQL's is not.
    assert 'INSERT INTO "testapp_widget", UPDATE' in message
    assert '2) COMMIT of INSERT INTO "outbox_message"' in message
    assert "died just after durable point 1: COMMIT of " in message
    assert (
        'INSERT INTO "testapp_widget", '
        'UPDATE "idempotency_idempotencyrecord": the state changed (effects moved '
        "by 1) and no event committed" in message
    )
    assert "never in on_commit() or with require_transaction=False" in message


def orders_and_mails():
    """One count per effect, as the suites take them (the demo mails nothing:
    a count that must not move)."""
    return {"orders": Order.objects.count(), "mails": len(mail.outbox)}


def test_the_demo_order_and_its_event_commit_together_counted_per_effect(api):
    check_state_and_event_commit_together(
        placing_orders(api), orders_and_mails, event_types=["order.created"]
    )


@BROKEN_URLS
def test_an_event_recorded_on_commit_is_named_when_counted_per_effect(api):
    def widgets_and_mails():
        return {"widgets": widget_count(), "mails": len(mail.outbox)}

    message = broken_message(
        check_state_and_event_commit_together,
        sending(api, "/broken/event-on-commit/"),
        widgets_and_mails,
    )

    assert "died just after durable point 1: COMMIT of " in message
    assert "the state changed (effects moved by {'widgets': 1}) and no event" in (
        message
    )
    assert "died just before durable point 1" not in message  # neither moved


def test_an_event_recorded_before_its_change_commits_without_it():
    message = broken_message(
        check_state_and_event_commit_together,
        lambda: broken_producers.event_before_its_change(uuid.uuid4().hex),
        widget_count,
    )

    assert message.startswith("Guarantee broken: a state change and its event")
    assert "died just before durable point 2: autocommitted INSERT INTO" in message
    assert "committed and the state did not change" in message


@BROKEN_URLS
def test_a_task_sent_straight_to_the_broker_is_named(api):
    with capture_events() as events:
        sending(api, "/broken/task-straight/")()

    message = broken_message(
        check_published_twice,
        events,
        {"widget.created": broken_producers.make_widget},
        widget_count,
    )

    assert message.startswith("Guarantee broken: events go through the outbox.\n")
    assert "task kit.make_widget sent straight to the broker: {" in message
    assert '"event_type": "widget.created"' in message
    assert "outbox events recorded: none" in message


@BROKEN_URLS
def test_the_producer_check_names_a_task_sent_straight_to_the_broker(api):
    message = broken_message(
        check_state_and_event_commit_together,
        sending(api, "/broken/task-straight/"),
        widget_count,
    )

    assert message.startswith("Guarantee broken: events go through the outbox.\n")
    assert "task kit.make_widget sent straight to the broker" in message


@BROKEN_URLS
@pytest.mark.parametrize(
    ("url", "task"),
    [
        # Its event goes through the outbox, another message past it: that
        # one cannot commit with the change (sent on commit, a death before
        # it loses it).
        ("/broken/event-and-task/", "kit.tell_the_warehouse"),
        # A message id header does not make a send the relay's.
        ("/broken/task-with-a-message-id/", "kit.make_widget"),
    ],
)
def test_the_producer_check_names_every_send_past_the_outbox(api, url, task):
    message = broken_message(
        check_state_and_event_commit_together, sending(api, url), widget_count
    )

    assert message.startswith("Guarantee broken: events go through the outbox.\n")
    assert f"task {task} sent straight to the broker" in message


def test_the_relays_own_deliveries_are_not_sends_past_the_outbox():
    publisher = CeleryTaskPublisher(
        tasks={"widget.created": "kit.make_widget"}, app=broken_producers.kit_app
    )
    with capture_events() as events:
        with transaction.atomic():
            record("widget", 1, "widget.created", {"name": "w-1"})
        drained = relay.drain(publisher=publisher)

    assert drained.published == 1
    assert [event.event_type for event in events] == ["widget.created"]
    assert events.bypassed == []


def test_a_kombu_publish_past_the_outbox_is_named():
    with capture_events() as events:
        broken_producers.publish_straight_to_the_broker("w-1")

    message = broken_message(
        check_published_twice, events, broken_producers.make_widget, widget_count
    )

    assert message.startswith("Guarantee broken: events go through the outbox.\n")
    assert (
        "a message published straight to exchange 'kit-events' with routing key "
        '\'widget.created\': {"name": "w-1"}' in message
    )


def test_the_producer_check_says_which_precondition_fails(api):
    def no_event():
        with transaction.atomic():
            Widget.objects.create(name=uuid.uuid4().hex)

    with pytest.raises(CannotCheck, match="committed no outbox event"):
        check_state_and_event_commit_together(no_event, widget_count)
    with pytest.raises(CannotCheck, match=r"of type widget\.created"):
        check_state_and_event_commit_together(
            placing_orders(api), Order.objects.count, event_types=["widget.created"]
        )
    with pytest.raises(CannotCheck, match="effects\\(\\) did not move"):
        check_state_and_event_commit_together(placing_orders(api), widget_count)
    same_key = lambda: api.post("/api/orders/", ORDER, key="the-same")  # noqa: E731
    with pytest.raises(CannotCheck, match="each call must make a new intent"):
        check_state_and_event_commit_together(same_key, Order.objects.count)


@pytest.mark.django_db(transaction=False)
def test_the_producer_check_refuses_to_run_inside_a_test_transaction(api):
    with pytest.raises(CannotCheck, match="needs committed transactions"):
        check_state_and_event_commit_together(placing_orders(api), Order.objects.count)


@consumer("kit.forward")
def make_and_forward(*, payload, **kwargs):
    """A consumer that is a producer too: its change and its next event."""
    widget = Widget.objects.create(name=payload["name"])
    record("widget", widget.pk, "widget.made", {"name": widget.name})


def test_a_consumer_recording_its_next_event_under_the_inbox_commits_both():
    def consume_a_new_message():
        call_with_task_kwargs(
            make_and_forward, new_message("widget.wanted", new_widget())
        )

    check_state_and_event_commit_together(consume_a_new_message, widget_count)
