"""The consumer checks pass on inbox consumers and name what broken ones break."""

from dataclasses import replace

import pytest
from django.db.models import Sum

from idempotency.shared.testing.guarantees import CannotCheck
from inbox.api import consumer
from inbox.testing import consumers
from inbox.testing.consumers import Consumer
from tests.testapp.models import Stock, Widget
from tests.testapp.tasks import reserve_stock
from tests.testing import broken, sound
from tests.testing.helpers import broken_message, new_widget, widget_count

pytestmark = pytest.mark.django_db(transaction=True)
BY_NAME = {"ids": lambda check: check.__name__}


@consumer("kit.make-widget")
def make_widget(*, payload, **kwargs):
    Widget.objects.create(name=payload["name"])


def widgets(consume) -> Consumer:
    return Consumer(
        consume=consume,
        event_type="widget.wanted",
        payload=new_widget,
        effects=widget_count,
    )


def reserved():
    return sum(Stock.objects.values_list("reserved", flat=True))


@pytest.mark.parametrize("check", consumers.CONSUMER_CHECKS, **BY_NAME)
def test_every_case_holds_for_a_consumer_under_the_inbox(check):
    check(widgets(make_widget))


@pytest.mark.parametrize("check", consumers.CONSUMER_CHECKS, **BY_NAME)
def test_every_case_holds_for_a_celery_consumer_task(check):
    payload = {"order": 1, "sku": "BOOK-1", "quantity": 2}
    check(Consumer(reserve_stock, "order.created", payload, reserved))


def test_a_consumer_receiving_under_an_id_of_its_own_is_told_the_message_id():
    message = broken_message(
        consumers.check_redelivery, widgets(broken.receives_under_an_id_of_its_own)
    )
    message_id = message.splitlines()[1].split()[1]

    assert "effects went 0 → 2 (expected 0 → 1)" in message
    assert "the inbox took the 2 deliveries for 2 messages" in message
    assert "broken.own-id" in message
    assert f"never the message's id {message_id}" in message
    assert "once-message-id" in message


def test_a_consumer_receiving_under_a_name_of_its_own_is_told_to_keep_one():
    message = broken_message(
        consumers.check_redelivery, widgets(broken.receives_under_a_name_of_its_own)
    )

    assert "the inbox took the 2 deliveries for 2 messages" in message
    assert "receive('broken.own-name-" in message
    assert "give receive() the same name on every delivery" in message
    assert "never the message's id" not in message


def test_a_consumer_not_asking_whether_it_is_a_duplicate_is_told_to():
    message = broken_message(
        consumers.check_redelivery, widgets(broken.applies_duplicates_too)
    )

    assert "effects went 0 → 2 (expected 0 → 1)" in message
    assert "the inbox took the redelivery for a duplicate" in message
    assert "receive('broken.no-duplicate-check', " in message
    assert "return from the block when delivery.duplicate is true" in message


def test_a_consumer_raising_on_a_duplicate_is_told_to_return():
    message = broken_message(
        consumers.check_redelivery, widgets(broken.raises_on_duplicates)
    )

    assert "the redelivery raised AlreadyApplied" in message
    assert "retried until it is dead" in message
    assert "return from the block when delivery.duplicate is true" in message


def test_a_consumer_that_applies_before_the_inbox_applies_a_redelivery_again():
    message = broken_message(
        consumers.check_redelivery, widgets(broken.applies_before_receive)
    )

    assert message == (
        "Guarantee broken: a redelivered message is applied once.\n"
        f"  {message.splitlines()[1].strip()}\n"
        "  effects went 0 → 2 (expected 0 → 1)"
    )
    assert "(widget.wanted) to applies_before_receive, delivered twice" in message


def test_a_consumer_that_applies_before_the_inbox_doubles_on_a_crash():
    message = broken_message(
        consumers.check_crash_anywhere, widgets(broken.applies_before_receive)
    )

    assert message.startswith(
        "Guarantee broken: a consumer that dies at any point applies the message "
        "exactly once in the end: no effect doubled, none lost."
    )
    assert '1) autocommitted INSERT INTO "testapp_widget"' in message
    assert '2) COMMIT of INSERT INTO "inbox_message"' in message
    assert (
        "died just after durable point 1: autocommitted INSERT INTO "
        '"testapp_widget"' in message
    )
    assert "the effect was applied twice" in message


def test_a_crash_counted_per_effect_names_the_effect_it_doubled():
    def per_effect():
        return {"widgets": widget_count(), "stock": reserved()}

    consumer = replace(widgets(broken.applies_before_receive), effects=per_effect)

    message = broken_message(consumers.check_crash_anywhere, consumer)

    assert "then redelivered: widgets: the effect was applied twice" in message
    assert "stock:" not in message  # the consumer reserves none


def test_a_consumer_that_applies_after_the_inbox_commit_loses_it_on_a_crash():
    consumer = widgets(broken.applies_after_receive)
    consumers.check_redelivery(consumer)  # a plain redelivery looks fine
    consumers.check_crash_before_ack(consumer)  # and so does dying at the end

    message = broken_message(consumers.check_crash_anywhere, consumer)

    assert "died just after durable point 1: COMMIT of INSERT INTO" in message
    assert "the effect was lost: effects went" in message


def test_a_consumer_without_the_inbox_applies_again_after_dying_before_the_ack():
    message = broken_message(
        consumers.check_crash_before_ack, widgets(broken.without_inbox)
    )

    assert message.startswith(
        "Guarantee broken: a consumer that dies after its commit and before the "
        "ack applies the message once."
    )
    assert (
        "the effect was applied twice: effects went 1 → 3 (expected 1 → 2)" in message
    )


def test_a_consumer_with_no_effect_cannot_be_checked():
    with pytest.raises(CannotCheck, match="effects\\(\\) stayed 0"):
        consumers.check_redelivery(
            Consumer(lambda **kwargs: None, "nothing", {}, widget_count)
        )


@pytest.mark.django_db(transaction=False)
def test_crash_checks_refuse_to_run_inside_a_test_transaction():
    with pytest.raises(CannotCheck, match="needs committed transactions"):
        consumers.check_crash_before_ack(widgets(make_widget))


def test_a_consumer_that_makes_nothing_durable_cannot_be_checked_for_a_crash():
    """A consumer deduplicating in the cache and acting outside the database
    has no durable point for the kit to die at: the crash case proves nothing
    about it, so it must say so instead of passing."""
    from django.core.cache import cache

    sent = []

    def dedupes_in_the_cache(*, headers, **kwargs):
        if cache.add(f"seen:{headers['once-message-id']}", True):
            sent.append(headers["once-message-id"])

    consumer = Consumer(dedupes_in_the_cache, "nothing.durable", {}, lambda: len(sent))
    consumers.check_redelivery(consumer)  # the cache dedupes a redelivery

    with pytest.raises(CannotCheck, match="made nothing durable"):
        consumers.check_crash_anywhere(consumer)


@pytest.mark.parametrize("check", consumers.CONSUMER_CHECKS, **BY_NAME)
def test_a_sum_of_an_empty_table_counts_as_0_in_one_count_per_effect(check):
    """The documented count, a Sum (None on an empty table), inside the dict
    of one count per effect: None counts as 0 there too."""

    def per_effect():
        total = Stock.objects.aggregate(total=Sum("reserved"))["total"]
        return {"reserved": total, "widgets": widget_count()}

    payload = {"order": 1, "sku": "BOOK-1", "quantity": 2}
    check(Consumer(reserve_stock, "order.created", payload, per_effect))


@pytest.mark.parametrize(
    "check",
    [consumers.check_crash_before_ack, consumers.check_crash_anywhere],
    **BY_NAME,
)
def test_a_consumer_sending_a_task_straight_to_the_broker_is_reported(check):
    """Its widget is under the inbox, so every count the crash cases read is
    right; the task it sends cannot commit with the inbox row, and the
    redelivery after a death before that commit sends it again."""
    message = broken_message(check, widgets(broken.ships_by_task))

    assert "task broken.ship_widget sent straight to the broker" in message
    assert "record() an outbox event" in message


@pytest.mark.parametrize("check", consumers.CONSUMER_CHECKS, **BY_NAME)
def test_every_case_holds_for_a_task_sent_in_a_step(check):
    """A task sent in a step, with its key, is the step's outside call: the
    steps cases judge it, the crash cases do not report it."""
    check(widgets(sound.ships_in_a_step))
