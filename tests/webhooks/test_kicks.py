"""The drain kick: coalesced per process, moved by a fake clock, never slept."""

from datetime import timedelta

import pytest

from webhooks import kicks
from webhooks.conf import webhooks_settings


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def sent():
    """The countdowns of the drains sent, in order."""
    return []


@pytest.fixture
def kicker(clock, sent, webhook_sources):
    webhook_sources.WEBHOOKS = {
        **webhook_sources.WEBHOOKS,
        "KICK_INTERVAL": timedelta(milliseconds=250),
    }
    return kicks.drain_kicks(send=sent.append, monotonic=clock)


def test_the_first_receipt_kicks_at_once(kicker, sent):
    kicker.kick()
    assert sent == [0.0]


def test_receipts_after_a_kick_share_one_trailing_kick_an_interval_later(
    kicker, clock, sent
):
    kicker.kick()
    for _ in range(50):
        clock.now += 0.001
        kicker.kick()

    assert sent == [0.0, pytest.approx(0.249)]


def test_a_busy_process_starts_one_drain_per_interval(kicker, clock, sent):
    starts = []
    kicker.send = lambda countdown: starts.append(clock.now + countdown)
    for _ in range(1000):  # 1000 receipts over one second
        kicker.kick()
        clock.now += 0.001

    assert starts == [pytest.approx(1000 + 0.25 * n) for n in range(5)]


def test_every_receipt_has_a_kick_that_starts_after_it(kicker, clock, sent):
    starts = []
    kicker.send = lambda countdown: starts.append(clock.now + countdown)
    for step in [0.0, 0.1, 0.1, 0.01, 0.3, 0.0, 0.249, 0.002, 1.0]:
        clock.now += step
        kicker.kick()
        # The latest drain sent starts no earlier than this receipt's commit
        # and no later than one interval after it.
        assert clock.now <= max(starts) <= clock.now + 0.25


def test_a_receipt_after_a_quiet_interval_kicks_at_once_again(kicker, clock, sent):
    kicker.kick()
    clock.now += 0.25
    kicker.kick()
    assert sent == [0.0, 0.0]


def test_a_failed_send_is_not_trusted_the_next_receipt_kicks_again(kicker, clock, sent):
    def broker_down(countdown):
        raise ConnectionError("broker down")

    kicker.send = broker_down
    kicker.kick()
    kicker.send = sent.append
    clock.now += 0.001
    kicker.kick()

    assert sent == [0.0]


def test_the_interval_is_the_setting(kicker, clock, sent, webhook_sources):
    webhook_sources.WEBHOOKS = {**webhook_sources.WEBHOOKS, "KICK_INTERVAL": 2}
    kicker.kick()
    clock.now += 0.5
    kicker.kick()
    assert sent == [0.0, pytest.approx(1.5)]


def test_a_settings_change_forgets_the_drains_sent(webhook_sources, monkeypatch):
    sent = []
    monkeypatch.setattr(kicks.drain_kicker, "send", sent.append)
    kicks.enqueue(1)
    kicks.enqueue(2)
    webhook_sources.WEBHOOKS = {**webhook_sources.WEBHOOKS, "KICK_INTERVAL": 60}
    kicks.enqueue(3)

    assert sent == [0.0, pytest.approx(0.25, abs=0.05), 0.0]


def test_the_default_enqueue_kicks_the_drain():
    assert webhooks_settings.ENQUEUE is kicks.enqueue
