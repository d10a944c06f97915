from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from webhooks.handlers import Event, handlers_for, is_stale, on

T = datetime(2026, 1, 1, tzinfo=UTC)


def test_an_older_event_is_stale():
    assert is_stale(T, T - timedelta(seconds=1))
    assert not is_stale(T, T + timedelta(seconds=1))


def test_a_tie_or_an_unknown_time_is_not_stale():
    assert not is_stale(T, T)
    assert not is_stale(None, T)
    assert not is_stale(T, None)


def test_the_event_helper_compares_its_own_time():
    event = Event(None, "s", "t", "d", occurred_at=T)
    assert event.is_stale(T + timedelta(hours=1))
    assert not event.is_stale(None)


def test_handlers_register_per_source_and_event_type():
    @on("github", "issues")
    def first(event): ...

    @on("github", "issues")
    def second(event): ...

    on("github", "issues")(first)  # registering twice keeps one

    assert handlers_for("github", "issues") == [first, second]
    assert handlers_for("stripe", "issues") == []


@pytest.mark.parametrize("event_type", ["*", "customer.*", "invoice.*.paid"])
def test_a_wildcard_event_type_is_refused_not_left_to_never_run(event_type):
    # dj-stripe users write handlers for "customer.*": registered as is, the
    # handler would never run, and every event it meant would be skipped.
    def handler(event): ...

    with pytest.raises(ImproperlyConfigured, match="wildcard"):
        on("stripe", event_type)(handler)
    assert handlers_for("stripe", event_type) == []
