"""The webhook checks pass on the library's intake with sound handlers, and
name what unsound handlers break, for every bundled verifier."""

import base64
import uuid

import pytest
from django.core import mail

from idempotency.shared.testing.guarantees import CannotCheck
from tests.testapp.models import Order, Widget
from tests.testing import broken
from tests.testing.helpers import broken_message, widget_count
from tests.webhooks.testing import broken_handlers
from webhooks import handlers
from webhooks.testing import deliveries
from webhooks.testing.deliveries import Webhook

pytestmark = pytest.mark.django_db(transaction=True)

SOURCES = {
    "kit-github": {"VERIFIER": "github", "SECRETS": ["kit-github-secret-0123456789"]},
    "kit-stripe": {"VERIFIER": "stripe", "SECRETS": ["whsec_kit_stripe_0123456789"]},
    "kit-standard": {
        "VERIFIER": "standard",
        "SECRETS": ["whsec_" + base64.b64encode(b"kit-standard-0123456789").decode()],
    },
    "kit-hmac": {"VERIFIER": "hmac", "SECRETS": ["kit-hmac-secret-0123456789"]},
    "kit-partner": {
        "VERIFIER": "hmac",
        "SECRETS": ["kit-partner-secret-0123456789"],
        "OPTIONS": {
            "SIGNATURE_HEADER": "X-Partner-Signature",
            "ID_HEADER": "X-Partner-Delivery",
            "EVENT_HEADER": "X-Partner-Event",
            "TIMESTAMP_HEADER": "X-Partner-Timestamp",
            "ENCODING": "base64",
            "PREFIX": "sha256=",
        },
    },
}
TIMED = ["kit-stripe", "kit-standard"]
UNTIMED = ["kit-github", "kit-hmac", "kit-partner"]


@pytest.fixture(autouse=True)
def sources(settings):
    # Over tests/webhooks/conftest.py's sources; its handler_registry fixture
    # forgets the handlers each test registers.
    settings.WEBHOOKS = {"SOURCES": SOURCES}


def make_widget(event):
    Widget.objects.create(name=event.delivery_id[:100])


def pay_if_newer(event):
    order = Order.objects.select_for_update().get(pk=event.data["data"]["order"])
    if event.is_stale(order.payment_updated_at):
        return
    order.status = event.data["data"]["status"]
    order.payment_updated_at = event.occurred_at
    order.save()


def widget_events(source, handler=make_widget, effects=widget_count) -> Webhook:
    handlers.on(source, "widget.wanted")(handler)
    return Webhook(
        source=source,
        event_type="widget.wanted",
        # A distinct body each time: GitHub and HMAC sources dedupe bodies.
        body=lambda: {"wanted": uuid.uuid4().hex},
        effects=effects,
    )


def payments(source, handler=pay_if_newer) -> Webhook:
    handlers.on(source, "kit.payment")(handler)

    def body():
        owner, _ = Order.owner.field.related_model.objects.get_or_create(
            username="payer"
        )
        order = Order.objects.create(owner=owner, sku="BOOK-1", quantity=1)
        return {"data": {"order": order.pk, "status": "paid"}}

    def paid_orders():
        return Order.objects.filter(status="paid").count()

    return Webhook(
        source=source,
        event_type="kit.payment",
        body=body,
        effects=paid_orders,
        older_body=lambda newer: {
            "data": {**newer["data"], "status": "payment_failed"}
        },
        state=lambda body: Order.objects.get(pk=body["data"]["order"]).status,
    )


@pytest.mark.parametrize("source", [*TIMED, *UNTIMED])
def test_a_redelivery_runs_the_handlers_once_for_every_verifier(source):
    deliveries.check_webhook_redelivery(widget_events(source))


@pytest.mark.parametrize("source", [*TIMED, *UNTIMED])
def test_a_worker_dying_mid_processing_applies_once_for_every_verifier(source):
    deliveries.check_webhook_crash(widget_events(source))


@pytest.mark.parametrize("source", TIMED)
def test_an_order_aware_handler_ignores_the_older_event(source):
    deliveries.check_webhook_order(payments(source))


@pytest.mark.parametrize("source", TIMED)
def test_a_handler_trusting_arrival_order_lets_an_older_event_win(source):
    message = broken_message(
        deliveries.check_webhook_order, payments(source, broken.pay_in_arrival_order)
    )

    assert message.startswith(
        "Guarantee broken: an event older than the state it would overwrite is "
        "ignored.\n"
    )
    assert "kit.payment of" in message
    assert 'set "paid"' in message
    assert 'arrived and set "payment_failed"' in message
    assert "order by event.is_stale(" in message


@pytest.mark.parametrize("source", TIMED)
def test_an_order_aware_handler_applies_the_newer_event_after_the_older(source):
    deliveries.check_webhook_newer_after_older(payments(source))


@pytest.mark.parametrize("source", TIMED)
def test_a_handler_stamping_arrival_time_ignores_a_newer_event(source):
    webhook = payments(source, broken_handlers.pay_stamped_on_arrival)
    deliveries.check_webhook_order(webhook)  # the one direction holds

    message = broken_message(deliveries.check_webhook_newer_after_older, webhook)

    assert message.startswith(
        "Guarantee broken: an event newer than the state it would overwrite is "
        "applied, even when it arrives after an older one.\n"
    )
    assert "kit.payment of" in message
    assert 'arrived first and set "payment_failed"' in message
    assert 'arrived and left "payment_failed"; on its own it sets "paid"' in message
    assert "never the arrival time" in message


@pytest.mark.parametrize("source", TIMED)
def test_a_handler_trusting_arrival_order_passes_only_the_newer_direction(source):
    # Symmetric to the case above: each direction catches what the other misses.
    webhook = payments(source, broken.pay_in_arrival_order)

    deliveries.check_webhook_newer_after_older(webhook)


ORDER_CHECKS = pytest.mark.parametrize(
    "check",
    [deliveries.check_webhook_order, deliveries.check_webhook_newer_after_older],
    ids=lambda check: check.__name__,
)


@ORDER_CHECKS
def test_the_order_cases_say_which_precondition_fails(check):
    webhook = payments("kit-stripe")
    webhook.older_body = lambda newer: newer  # the older event also pays

    with pytest.raises(CannotCheck, match="sets the same state as the newer"):
        check(webhook)


@ORDER_CHECKS
@pytest.mark.parametrize("source", UNTIMED)
def test_the_order_cases_are_skipped_where_deliveries_carry_no_event_time(
    check, source
):
    with pytest.raises(pytest.skip.Exception, match="carry no event time"):
        check(payments(source))


def test_a_handler_mailing_from_its_transaction_mails_twice_after_a_crash():
    webhook = widget_events(
        "kit-github", broken.mail_the_team, effects=lambda: len(mail.outbox)
    )
    deliveries.check_webhook_redelivery(webhook)  # a redelivery alone is fine

    message = broken_message(deliveries.check_webhook_crash, webhook)

    assert message.startswith(
        "Guarantee broken: a webhook whose worker died while processing it is "
        "applied exactly once.\n"
    )
    assert "the worker died just before durable point 2: COMMIT of" in message
    assert (
        "then the task was redelivered: the effect was applied twice: "
        "effects went 4 → 6 (expected 4 → 5)" in message
    )


def test_a_source_without_a_handler_for_the_event_cannot_be_checked():
    webhook = Webhook("kit-github", "nobody.listens", dict, widget_count)

    with pytest.raises(AssertionError, match="is a handler registered"):
        deliveries.check_webhook_redelivery(webhook)


@pytest.mark.parametrize("check", deliveries.WEBHOOK_CHECKS, ids=lambda c: c.__name__)
def test_a_source_that_is_not_configured_fails_every_case_instead_of_skipping(check):
    """A misspelt source would skip the whole suite: green, having proved
    nothing."""
    webhook = widget_events("kit-strpe")
    webhook.state = lambda body: None

    with pytest.raises(CannotCheck) as refused:
        check(webhook)

    assert "WEBHOOKS['SOURCES'] has no source 'kit-strpe'" in str(refused.value)


@pytest.mark.parametrize("source", TIMED)
def test_a_handler_dropping_events_by_age_lets_an_older_event_win(source):
    """A handler taking an event for stale by its age (older than 45
    minutes), whatever the state's stamp, applies an event a minute older
    than the state: the order case must not pass it."""
    webhook = payments(source, broken_handlers.pay_unless_old)
    deliveries.check_webhook_newer_after_older(webhook)  # this direction holds

    message = broken_message(deliveries.check_webhook_order, webhook)

    assert message.startswith(
        "Guarantee broken: an event older than the state it would overwrite is "
        "ignored.\n"
    )
    assert 'arrived and set "payment_failed"' in message


@pytest.mark.parametrize("source", TIMED)
def test_a_handler_checking_a_stamp_it_never_saves_is_told_to_save_it(source):
    """It asks is_stale() as the advice says, so the advice must go on: the
    state must be stamped with the event's time as each event applies."""
    webhook = payments(source, broken_handlers.pay_checking_a_stamp_it_never_saves)

    message = broken_message(deliveries.check_webhook_order, webhook)

    assert 'arrived and set "payment_failed"' in message
    assert "order by event.is_stale(<the stamp of the state>)" in message
    assert "stamp the state with event.occurred_at as each event applies" in message


def test_a_handler_sending_a_task_straight_to_the_broker_is_reported():
    """Its widget is under the handler's transaction, so the count is right;
    the task cannot commit with it, and a death before that commit has the
    redelivered receipt send it again."""
    webhook = widget_events("kit-github", broken.ships_the_widget_by_task)

    message = broken_message(deliveries.check_webhook_crash, webhook)

    assert message.startswith(
        "Guarantee broken: a webhook whose worker died while processing it is "
        "applied exactly once.\n"
    )
    assert "task broken.ship_widget sent straight to the broker" in message
    assert "record() an outbox event" in message
