"""The broker stops in the middle of a relay run and comes back: the backlog
waits, backing off, and then drains; every event reaches the broker."""

import pytest
from django.db.models import Max, Min
from kombu import Connection, Exchange, Queue

from outbox import relay
from outbox.models import OutboxMessage
from outbox.publishers import KombuPublisher

from .backlog import published_ids, record_events
from .processes import redis_server

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

State = OutboxMessage.State
COUNT = 12
BATCH = 5


def outbox_queue():
    # Bound to the relay's exchange, so what it publishes stays until read.
    return Queue("faults-outbox", Exchange("outbox", type="topic"), routing_key="#")


class StoppingPublisher(KombuPublisher):
    """A Kombu publisher that runs ``before_stop`` and stops the broker just
    before publish number ``stop_at``, in the middle of a batch."""

    def __init__(self, broker, *, stop_at=None, before_stop=None):
        super().__init__(url=broker.url, declare=(outbox_queue(),), connect_timeout=1)
        self.broker = broker
        self.stop_at = stop_at
        self.before_stop = before_stop
        self.calls = 0

    def publish_many(self, messages):
        first = self.calls + 1
        self.calls += len(messages)
        if self.stop_at is None or not first <= self.stop_at <= self.calls:
            return super().publish_many(messages)
        split = self.stop_at - first
        refused = super().publish_many(messages[:split]) if split else {}
        self.before_stop()
        self.broker.stop()
        return {**refused, **super().publish_many(messages[split:])}


def consume(url):
    """Read (and ack) every message in the queue; return their outbox ids."""
    with Connection(url) as conn:
        queue = outbox_queue()(conn.default_channel)
        ids = []
        while (message := queue.get(no_ack=True)) is not None:
            ids.append(message.headers["id"])
    return ids


def backlog_wait(attempts, now):
    """Check every unpublished message has had ``attempts``; return how long
    from ``now`` until the first is due again."""
    pending = OutboxMessage.objects.filter(state=State.PENDING)
    state = pending.aggregate(
        fewest=Min("attempts"), most=Max("attempts"), due=Min("available_at")
    )
    assert (state["fewest"], state["most"]) == (attempts, attempts)
    return state["due"] - now


def test_a_broker_restart_delays_the_backlog_and_loses_nothing(clock, monkeypatch):
    # No jitter: each failed attempt waits its whole backoff ceiling.
    monkeypatch.setattr(relay, "backoff", relay.backoff_ceiling)
    ids = record_events(COUNT)
    received = []
    with redis_server() as broker:

        def read_what_it_holds():
            # Nothing persists across the restart: read it while it is up.
            received.extend(consume(broker.url))

        publisher = StoppingPublisher(broker, stop_at=4, before_stop=read_what_it_holds)
        result = relay.drain(batch_size=BATCH, publisher=publisher)
        assert (result.published, result.failed, result.dead) == (3, COUNT - 3, 0)
        assert set(received) == published_ids()

        # While it is down, each run fails every due message again, and each
        # failure backs off twice as long as the one before.
        waits = [backlog_wait(1, clock.now())]
        for attempts in (2, 3):
            clock.advance(seconds=waits[-1].total_seconds() + 0.1)
            result = relay.drain(publisher=StoppingPublisher(broker))
            assert (result.published, result.failed) == (0, COUNT - 3)
            waits.append(backlog_wait(attempts, clock.now()))
        assert waits[0] < waits[1] < waits[2]
        assert published_ids() == set(received)
        error = OutboxMessage.objects.filter(state=State.PENDING).first().last_error
        assert "PublishError" in error

        broker.start()  # on the same port, empty
        clock.advance(seconds=waits[-1].total_seconds() + 0.1)
        result = relay.drain(publisher=StoppingPublisher(broker))
        assert (result.published, result.failed) == (COUNT - 3, 0)
        received.extend(consume(broker.url))

    assert published_ids() == ids == set(received)
    assert len(received) == COUNT  # and, here, nothing twice
    assert not OutboxMessage.objects.exclude(state=State.PUBLISHED).exists()
