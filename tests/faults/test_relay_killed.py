"""A relay process is SIGKILLed between its pipelined publish and the batch's
write-back: the batch goes out again after the lease (duplicates), and no
message is lost."""

import signal
import subprocess
import sys
import uuid

import pytest
from kombu import Connection, Exchange, Queue

from idempotency.shared.settings import as_timedelta
from outbox import relay
from outbox.models import OutboxMessage
from outbox.publishers import KombuPublisher
from tests.servers import AMQP_URL

from .backlog import published_ids, record_events
from .processes import REDIS_URL, ROOT, child_env

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

State = OutboxMessage.State
COUNT = 12
BATCH = 5


@pytest.fixture(params=[REDIS_URL, AMQP_URL], ids=["redis", "rabbitmq"])
def broker(request):
    """A broker URL, and a queue of this test's own bound to its exchange."""
    name = f"relay-faults-{uuid.uuid4().hex[:8]}"
    exchange = Exchange(name, type="topic", durable=True)
    queue = Queue(name, exchange, routing_key="#", durable=True)
    with Connection(request.param) as conn:
        queue(conn.default_channel).declare()
    yield request.param, queue
    with Connection(request.param) as conn:
        queue(conn.default_channel).delete()
        exchange(conn.default_channel).delete()


def held(url, queue) -> list[str]:
    """Read (and ack) every message the queue holds; return their outbox ids."""
    with Connection(url) as conn:
        bound = queue(conn.default_channel)
        ids = []
        while (message := bound.get(no_ack=True)) is not None:
            ids.append(message.properties["message_id"])
    return ids


def test_killed_after_publishing_a_batch_loses_nothing(clock, broker):
    url, queue = broker
    ids = record_events(COUNT)
    exchange = queue.exchange.name
    # Its second batch is published, then the process dies before writing it back.
    args = [url, exchange, queue.name, str(BATCH), "2"]
    child = subprocess.run(
        [sys.executable, "-m", "tests.faults.relay_worker", *args],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-4000:]

    first = held(url, queue)
    assert len(first) == 2 * BATCH  # the broker holds both batches...
    assert len(published_ids()) == BATCH  # ...the outbox marked only the first
    leased = OutboxMessage.objects.filter(state=State.PENDING, attempts=1)
    assert set(first) - published_ids() == {
        str(pk) for pk in leased.values_list("pk", flat=True)
    }

    # Once the dead relay's lease has lapsed, the next relay publishes the rest.
    lease = as_timedelta(relay.outbox_settings.LEASE)
    clock.advance(seconds=lease.total_seconds() + 1)
    publisher = KombuPublisher(url=url, exchange=exchange, declare=(queue,))
    assert relay.drain(batch_size=BATCH, publisher=publisher).published == COUNT - BATCH
    second = held(url, queue)

    assert published_ids() == ids == set(first) | set(second)
    # At least once: the unmarked batch went out twice, nothing went missing.
    assert len(first) + len(second) == COUNT + BATCH
