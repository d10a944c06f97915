import pytest

from outbox.publishers import InMemoryPublisher
from tests.servers import AMQP_URL
from tests.servers import OUTBOX_REDIS_URL as REDIS_URL

__all__ = ["AMQP_URL", "REDIS_URL"]

# Nothing listens here: a broker that is down.
DEAD_REDIS_URL = "redis://127.0.0.1:1/11"
# The test double as OUTBOX settings name it, allowed as the test settings do.
IN_MEMORY = {
    "PUBLISHER": "outbox.publishers.InMemoryPublisher",
    "PUBLISHER_OPTIONS": {"allow_in_memory": True},
}


@pytest.fixture
def sent():
    """What the InMemoryPublisher published during this test."""
    InMemoryPublisher.reset()
    yield InMemoryPublisher.sent
    InMemoryPublisher.reset()


@pytest.fixture
def eager_celery():
    """Run sent tasks (the relay's kick) in the sending thread."""
    from tests.celery import app

    app.conf.task_always_eager = True
    yield app
    app.conf.task_always_eager = False


@pytest.fixture
def make_messages():
    """Record ``count`` committed-looking events fast (one bulk insert)."""
    from idempotency.shared import clock
    from outbox.api import MESSAGE_ID_HEADER
    from outbox.models import OutboxMessage

    def make(count, *, aggregate_type="order", aggregate_id=None, **extra):
        now = clock.now()
        rows = []
        for i in range(count):
            message = OutboxMessage(
                aggregatetype=aggregate_type,
                aggregateid=str(aggregate_id if aggregate_id is not None else i),
                type="order.created",
                payload={"n": i},
                **{"created_at": now, "available_at": now, **extra},
            )
            message.headers = {MESSAGE_ID_HEADER: str(message.id)}
            rows.append(message)
        return OutboxMessage.objects.bulk_create(rows, batch_size=1000)

    return make
