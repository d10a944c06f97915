"""Relay kicks: one per transaction, runs at least an interval apart per process,
and never one that starts before the commit it answers."""

import pytest
from django.db import transaction
from django.test.utils import override_settings

from outbox import tasks
from outbox.api import record
from outbox.kicks import RelayKicker
from outbox.models import OutboxMessage

from .conftest import IN_MEMORY

pytestmark = pytest.mark.django_db(transaction=True)

KICKING = override_settings(
    OUTBOX={
        **IN_MEMORY,
        "KICK_ON_COMMIT": True,
        "KICK_INTERVAL": 0.1,
    }
)


class FakeMonotonic:
    now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def sends(monkeypatch):
    """Each relay task sent, as its countdown (None: at once)."""
    sent = []
    monkeypatch.setattr(
        tasks.relay,
        "apply_async",
        lambda *args, countdown=None, **kwargs: sent.append(countdown),
    )
    return sent


@pytest.fixture
def kicker(monkeypatch):
    from outbox import admin, api

    clock = FakeMonotonic()
    fresh = RelayKicker(monotonic=clock)
    monkeypatch.setattr(api, "relay_kicker", fresh)
    monkeypatch.setattr(admin, "relay_kicker", fresh)
    fresh.clock = clock
    return fresh


def commit_events(count=1):
    with transaction.atomic():
        for n in range(count):
            record("order", n, "order.created", {})


@KICKING
def test_one_kick_per_transaction_whatever_it_records(kicker, sends):
    commit_events(3)
    assert sends == [None]


@KICKING
def test_commits_inside_the_interval_share_one_trailing_kick(kicker, sends):
    commit_events()
    kicker.clock.now += 0.03
    commit_events()
    kicker.clock.now += 0.03
    commit_events()

    # Immediately for the first; the others wait for the window's end, which
    # comes after both of their commits.
    assert sends[0] is None
    assert sends[1] == pytest.approx(0.07)
    assert len(sends) == 2


@KICKING
def test_a_commit_after_the_interval_kicks_at_once_again(kicker, sends):
    commit_events()
    kicker.clock.now += 0.1
    commit_events()
    assert sends == [None, None]


@KICKING
def test_a_rolled_back_transaction_leaves_the_next_commit_its_kick(kicker, sends):
    with pytest.raises(RuntimeError), transaction.atomic():
        record("order", 1, "order.created", {})
        raise RuntimeError("the view failed")
    assert sends == []
    commit_events()
    assert sends == [None]


@KICKING
def test_a_lost_kick_is_retried_by_the_next_commit(kicker, monkeypatch):
    attempts = []

    def broker_down(*args, **kwargs):
        attempts.append(kwargs.get("countdown"))
        raise ConnectionError("broker down")

    monkeypatch.setattr(tasks.relay, "apply_async", broker_down)
    commit_events()  # the request does not fail: beat is the safety net
    kicker.clock.now += 0.01
    commit_events()
    assert attempts == [None, None]  # not deferred behind the lost one


def test_no_kick_when_kicking_is_off(kicker, sends):
    with override_settings(OUTBOX={"KICK_ON_COMMIT": False}):
        commit_events()
    assert sends == []


class OutboxElsewhere:
    """A router that writes the outbox to another alias, as a project's
    tests may switch to with override_settings."""

    def db_for_write(self, model, **hints):
        return "elsewhere" if model is OutboxMessage else None


@KICKING
def test_a_kick_follows_the_router_that_override_settings_sets(kicker, monkeypatch):
    # The kicker of an alias remembered whether the router named it when it
    # first kicked: after DATABASE_ROUTERS changed, an event recorded on
    # "default" kicked a relay of the router's new alias, which never reads
    # it (the event waited for beat).
    relays = []
    monkeypatch.setattr(
        tasks.relay,
        "apply_async",
        lambda *args, kwargs=None, **options: relays.append(kwargs),
    )
    commit_events()
    kicker.clock.now += 1
    with (
        override_settings(DATABASE_ROUTERS=[f"{__name__}.OutboxElsewhere"]),
        transaction.atomic(using="default"),
    ):
        record("order", 1, "order.created", {}, using="default")

    assert relays == [None, {"using": "default"}]
