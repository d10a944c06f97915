"""Every publisher passes one contract, against the real brokers."""

import contextlib
import uuid

import pytest
import redis
from django.utils import timezone
from kombu import Connection, Exchange, Queue

from outbox.exceptions import OutboxConfigurationError, PublishError
from outbox.models import OutboxMessage
from outbox.publishers import (
    BasePublisher,
    CeleryTaskPublisher,
    InMemoryPublisher,
    KombuPublisher,
)

from .conftest import AMQP_URL, DEAD_REDIS_URL, REDIS_URL
from .proxy import cuttable

DEAD_AMQP_URL = "amqp://guest:guest@127.0.0.1:1//"


def make_message(**fields):
    fields = {
        "aggregatetype": "order",
        "aggregateid": "17",
        "type": "order.created",
        "payload": {"sku": "BOOK-1", "quantity": 2},
        "created_at": timezone.now(),
        "available_at": timezone.now(),
        "attempts": 1,
        **fields,
    }
    message = OutboxMessage(**fields)
    message.headers = {"once-message-id": str(message.id), "traceparent": "00-ab"}
    return message


class PublisherContract:
    """What the relay relies on, whatever the broker."""

    def make_publisher(self) -> BasePublisher:
        raise NotImplementedError

    def make_broken_publisher(self) -> BasePublisher:
        raise NotImplementedError

    @contextlib.contextmanager
    def cuttable_publisher(self):
        """Yield a publisher and a context manager during which its broker
        cannot be reached."""
        raise NotImplementedError

    def receive(self, count) -> list[dict]:
        """The published messages as {message_id, type, payload, headers}."""
        raise NotImplementedError

    def test_a_published_message_carries_the_outbox_id_and_event(self):
        message = make_message()
        with self.make_publisher() as publisher:
            publisher.publish(message)

        [got] = self.receive(1)
        assert got["message_id"] == str(message.id)
        assert got["headers"]["once-message-id"] == str(message.id)
        assert got["headers"]["traceparent"] == "00-ab"
        assert got["type"] == "order.created"
        assert got["payload"] == {"sku": "BOOK-1", "quantity": 2}

    def test_messages_keep_their_publish_order(self):
        messages = [make_message() for _ in range(5)]
        with self.make_publisher() as publisher:
            for message in messages:
                publisher.publish(message)

        got = self.receive(5)
        assert [g["message_id"] for g in got] == [str(m.id) for m in messages]

    def test_a_broker_error_raises_instead_of_counting_as_published(self):
        with (
            pytest.raises(PublishError),
            self.make_broken_publisher() as publisher,
        ):
            publisher.publish(make_message())

    def test_a_publisher_recovers_after_a_failure(self):
        before, lost, after = make_message(), make_message(), make_message()
        with self.cuttable_publisher() as (publisher, outage), publisher:
            publisher.publish(before)
            with outage(), pytest.raises(PublishError):
                publisher.publish(lost)
            publisher.publish(after)  # the same publisher, once the broker is back

        got = self.receive(2)
        assert [g["message_id"] for g in got] == [str(before.id), str(after.id)]


class TestBasePublisher:
    def test_publish_must_be_overridden(self):
        with pytest.raises(NotImplementedError, match="publish"):
            BasePublisher().publish(make_message())


class TestInMemoryPublisher(PublisherContract):
    @pytest.fixture(autouse=True)
    def _sent(self, sent):
        self.sent = sent

    def make_publisher(self):
        return InMemoryPublisher()

    def make_broken_publisher(self):
        InMemoryPublisher.failing = True
        return InMemoryPublisher()

    @contextlib.contextmanager
    def cuttable_publisher(self):
        @contextlib.contextmanager
        def outage():
            InMemoryPublisher.failing = True
            yield
            InMemoryPublisher.failing = False

        yield InMemoryPublisher(), outage

    def receive(self, count):
        assert len(self.sent) == count
        return [
            {
                "message_id": m.id,
                "type": m.type,
                "payload": m.payload,
                "headers": m.headers,
            }
            for m in self.sent
        ]


class KombuContract(PublisherContract):
    url = None
    dead_url = None

    @pytest.fixture(autouse=True)
    def _queue(self):
        name = f"outbox-test-{uuid.uuid4().hex[:8]}"
        # Declared as the publisher declares it: durable, topic.
        self.exchange = Exchange(name, type="topic", durable=True)
        self.queue = Queue(name, self.exchange, routing_key="order")
        with Connection(self.url) as conn:
            self.queue(conn.channel()).declare()
        yield
        with Connection(self.url) as conn:
            self.queue(conn.channel()).delete()
            self.exchange(conn.channel()).delete()

    def make_publisher(self, url=None):
        return KombuPublisher(
            url=url or self.url, exchange=self.exchange.name, declare=(self.queue,)
        )

    @contextlib.contextmanager
    def cuttable_publisher(self):
        with cuttable(self.url) as proxy:
            yield self.make_publisher(proxy.url), proxy.cut

    def make_broken_publisher(self):
        return KombuPublisher(url=self.dead_url, exchange=self.exchange.name)

    def receive(self, count):
        got = []
        with Connection(self.url) as conn:
            simple = conn.SimpleQueue(self.queue)
            for _ in range(count):
                message = simple.get(timeout=5)
                got.append(
                    {
                        "message_id": message.properties["message_id"],
                        "type": message.headers["type"],
                        "payload": message.payload,
                        "headers": message.headers,
                    }
                )
                message.ack()
            simple.close()
        return got


class TestKombuPublisherOnRedis(KombuContract):
    url = REDIS_URL
    dead_url = DEAD_REDIS_URL

    def test_routing_is_by_aggregate_type(self):
        with self.make_publisher() as publisher:
            publisher.publish(make_message(aggregatetype="invoice"))
            publisher.publish(make_message())
        # Only the "order" binding matched; the invoice went elsewhere.
        assert len(self.receive(1)) == 1
        assert redis.Redis.from_url(self.url).llen(self.queue.name) == 0


class TestKombuPublisherOnRabbitMQ(KombuContract):
    url = AMQP_URL
    dead_url = DEAD_AMQP_URL

    def test_publisher_confirms_are_on(self):
        with self.make_publisher() as publisher:
            publisher.publish(make_message())
            assert publisher.connection.transport_options["confirm_publish"] is True
        self.receive(1)

    def test_a_refused_publish_on_a_live_broker_raises(self):
        # The exchange does not exist: RabbitMQ closes the channel, and with
        # confirms the publish hears of it instead of returning as if sent.
        publisher = KombuPublisher(url=self.url, exchange="outbox-test-missing")
        with publisher:
            publisher._producer()
            publisher.exchange = Exchange("outbox-test-does-not-exist", type="topic")
            with pytest.raises(PublishError):
                publisher.publish(make_message())


class TestCeleryTaskPublisher(PublisherContract):
    task_name = "outbox_tests.on_order_created"

    @pytest.fixture(autouse=True)
    def _queue(self):
        self.queue = Queue(f"outbox-test-tasks-{uuid.uuid4().hex[:8]}")
        with Connection(REDIS_URL) as conn:
            self.queue(conn.channel()).declare()
        yield
        with Connection(REDIS_URL) as conn:
            self.queue(conn.channel()).delete()

    def make_publisher(self, url=REDIS_URL):
        return CeleryTaskPublisher(
            tasks={"order.created": self.task_name},
            queue=self.queue.name,
            broker_url=url,
        )

    def make_broken_publisher(self):
        return self.make_publisher(DEAD_REDIS_URL)

    @contextlib.contextmanager
    def cuttable_publisher(self):
        with cuttable(REDIS_URL) as proxy:
            yield self.make_publisher(proxy.url), proxy.cut

    def receive(self, count):
        got = []
        with Connection(REDIS_URL) as conn:
            simple = conn.SimpleQueue(self.queue)
            for _ in range(count):
                message = simple.get(timeout=5)
                assert message.headers["task"] == self.task_name
                _args, kwargs, _embed = message.payload
                got.append(
                    {
                        "message_id": message.headers["id"],  # the task id
                        "type": kwargs["event_type"],
                        "payload": kwargs["payload"],
                        "headers": kwargs["headers"],
                    }
                )
                message.ack()
            simple.close()
        return got

    def test_an_event_type_without_a_task_fails_loudly(self):
        with (
            self.make_publisher() as publisher,
            pytest.raises(OutboxConfigurationError, match=r"order\.shipped"),
        ):
            publisher.publish(make_message(type="order.shipped"))
