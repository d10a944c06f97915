"""The relay's database connection is terminated mid-batch: nothing is marked
published that was not published, and the next relay publishes everything."""

import threading

import pytest
from django.db import OperationalError, connection, connections

from idempotency.shared.settings import as_timedelta
from outbox import relay
from outbox.models import OutboxMessage
from outbox.publishers import BasePublisher

from .backlog import published_ids, record_events

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

State = OutboxMessage.State
COUNT = 12
BATCH = 5


class RecordingPublisher(BasePublisher):
    """Record each publish; at publish number ``block_at``, stop there until
    the test has terminated the relay's connection."""

    def __init__(self, gate=None, block_at=None):
        self.sent = []
        self.gate = gate
        self.block_at = block_at

    def publish(self, message):
        if len(self.sent) + 1 == self.block_at:
            self.gate.wait_here(connection)
        self.sent.append(str(message.id))


class Gate:
    """Where the relay thread waits, holding its connection, for the test."""

    def __init__(self):
        self.reached = threading.Event()
        self.released = threading.Event()
        self.backend_pid = None

    def wait_here(self, db):
        self.backend_pid = db.connection.info.backend_pid
        self.reached.set()
        assert self.released.wait(10), "the test never released the relay"

    def terminate_backend(self):
        """Wait for the relay to arrive, then cut its connection server-side."""
        assert self.reached.wait(10), "the relay never reached the gate"
        with connection.cursor() as cursor:
            # The timeout makes it wait until the backend is gone, locks and all.
            cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [self.backend_pid])
            assert cursor.fetchone() == (True,)
        self.released.set()


def relay_killed_at(gate, func):
    """Run ``func`` (a relay) in a thread on its own connection, terminate
    that connection once it reaches ``gate``; return what it raised."""
    raised = []

    def run():
        try:
            func()
        except Exception as exc:  # reported to the test
            raised.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    gate.terminate_backend()
    thread.join(10)
    assert not thread.is_alive(), "the relay hung after losing its connection"
    return raised


def test_killed_while_publishing_marks_only_what_it_published(clock):
    ids = record_events(COUNT)
    gate = Gate()
    first = RecordingPublisher(gate, block_at=BATCH + 2)  # inside the 2nd batch

    raised = relay_killed_at(
        gate, lambda: relay.drain(batch_size=BATCH, publisher=first)
    )
    assert [type(exc) for exc in raised] == [OperationalError]

    # The first batch was written back; the second was published, never
    # marked; the third was never claimed.
    assert published_ids() <= set(first.sent)
    assert len(published_ids()) == BATCH
    pending = OutboxMessage.objects.filter(state=State.PENDING)
    assert sorted(pending.values_list("attempts", flat=True)) == [0, 0] + [1] * BATCH

    # Once the dead relay's lease has lapsed, the next relay publishes the rest.
    lease = as_timedelta(relay.outbox_settings.LEASE)
    clock.advance(seconds=lease.total_seconds() + 1)
    second = RecordingPublisher()
    assert relay.drain(publisher=second).published == COUNT - BATCH
    assert published_ids() == ids == set(first.sent) | set(second.sent)
    # At least once: the unmarked batch went out twice, nothing went missing.
    assert len(first.sent) + len(second.sent) == COUNT + BATCH


def test_killed_inside_the_claim_leaves_every_message_claimable():
    ids = record_events(COUNT)
    gate = Gate()

    def hold_after_claim(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql.startswith("WITH picked"):
            # The rows are claimed and locked, the claim not committed yet.
            gate.wait_here(context["connection"])
        return result

    first = RecordingPublisher()

    def drain_holding():
        with connection.execute_wrapper(hold_after_claim):
            relay.drain(batch_size=BATCH, publisher=first)

    raised = relay_killed_at(gate, drain_holding)
    assert [type(exc) for exc in raised] == [OperationalError]

    # The claim rolled back with the connection: no lease to wait out.
    assert first.sent == []
    untouched = OutboxMessage.objects.filter(
        state=State.PENDING, attempts=0, locked_until=None
    )
    assert untouched.count() == COUNT
    second = RecordingPublisher()
    assert relay.drain(publisher=second).published == COUNT
    assert published_ids() == ids == set(second.sent)
    assert len(second.sent) == COUNT
