"""The outbox kit on an event recorded and then rolled back: it is never
sent, and the check that would hand it to its consumer says so instead of
only "no captured event"."""

import pytest
from django.test import TransactionTestCase

from idempotency.shared.testing.guarantees import CannotCheck
from outbox.testing.events import capture_events, check_published_twice
from tests.testing import broken
from tests.testing.helpers import widget_count


def consume_widget(**message):
    """Never called: the event it would get was rolled back."""


def test_an_event_rolled_back_is_named_by_the_check(transactional_db):
    with capture_events() as events:
        broken.places_order_losing_its_event("w-1")

    assert [event.event_type for event in events.rolled_back] == ["widget.made"]
    with pytest.raises(CannotCheck) as caught:
        check_published_twice(events, consume_widget, widget_count)
    assert "recorded in the block and rolled back with their transaction, so " in (
        str(caught.value)
    )
    assert "never sent: ['widget.made']" in str(caught.value)


def test_an_event_awaiting_a_test_transactions_commit_is_not_rolled_back(db):
    with capture_events() as events:
        broken.places_order_losing_its_event("w-1")
        with pytest.raises(CannotCheck) as caught:
            check_published_twice(events, consume_widget, widget_count)

    assert events.rolled_back == []
    assert "rolled back" not in str(caught.value)


class UnittestStyle(TransactionTestCase):
    """The capture and the check as a unittest ``TransactionTestCase`` uses
    them."""

    def test_an_event_rolled_back_is_named(self):
        with capture_events() as events:
            broken.places_order_losing_its_event("w-1")
        with self.assertRaisesRegex(CannotCheck, r"never sent: \['widget.made'\]"):
            check_published_twice(events, consume_widget, widget_count)
