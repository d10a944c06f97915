"""Every publisher passes one contract, against the real brokers."""

import contextlib
import socket
import threading
import time
import uuid

import pytest
from amqp.exceptions import PreconditionFailed
from celery import Celery, shared_task
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string
from kombu import Connection, Exchange, Queue
from kombu.transport import redis as redis_transport

from idempotency.shared.storable import MAX_DEPTH
from idempotency.shared.workers import import_task_modules
from outbox import relay
from outbox.api import record
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
from .test_api import nested

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


# Header names brokers and Celery act on, as a user's record(headers=...)
# could give them: another task, an expiry in the past, a forged task id,
# RabbitMQ's sender-selected routing keys.
TRANSPORT_HEADERS = {
    "task": "outbox_tests.not_the_mapped_task",
    "expires": "2000-01-01T00:00:00Z",
    "eta": "2999-01-01T00:00:00Z",
    "id": "forged",
    "retries": 99,
    "CC": ["invoice"],
    "BCC": ["invoice"],
}


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
        assert got["headers"]["once-headers"]["traceparent"] == "00-ab"
        assert got["type"] == "order.created"
        assert got["payload"] == {"sku": "BOOK-1", "quantity": 2}

    def test_the_events_headers_travel_in_their_own_namespace(self):
        message = make_message()
        message.headers = {**message.headers, **TRANSPORT_HEADERS}
        with self.make_publisher() as publisher:
            publisher.publish(message)

        [got] = self.receive(1)
        assert got["message_id"] == str(message.id)
        assert got["headers"]["id"] == str(message.id)
        assert got["headers"]["once-headers"] == message.headers
        assert not (set(TRANSPORT_HEADERS) - {"id"}) & set(got["headers"])

    def test_the_intent_travels_like_the_message_id(self):
        intent = "ab" * 32
        message = make_message()
        message.headers = {**message.headers, "once-intent": intent}
        plain = make_message()
        with self.make_publisher() as publisher:
            publisher.publish(message)
            publisher.publish(plain)

        got, got_plain = self.receive(2)
        # Beside the message id, and inside the event's own headers, as
        # Debezium's router sends it.
        assert got["headers"]["once-intent"] == intent
        assert got["headers"]["once-headers"]["once-intent"] == intent
        assert "once-intent" not in got_plain["headers"]

    def test_a_malformed_intent_stays_in_the_events_own_headers(self):
        # Promoted only as a digest: "a\r\nb: c" must not reach the transport.
        odd = ["a\r\nb: c", "AB" * 32, "ab" * 33, ["ab" * 32]]
        messages = [make_message() for _ in odd]
        for message, intent in zip(messages, odd, strict=True):
            message.headers = {**message.headers, "once-intent": intent}
        with self.make_publisher() as publisher:
            for message in messages:
                publisher.publish(message)

        got = self.receive(len(odd))
        assert ["once-intent" in each["headers"] for each in got] == [False] * 4
        assert [each["headers"]["once-headers"]["once-intent"] for each in got] == odd

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
        return InMemoryPublisher(allow_in_memory=True)

    def make_broken_publisher(self):
        InMemoryPublisher.failing = True
        return InMemoryPublisher(allow_in_memory=True)

    @contextlib.contextmanager
    def cuttable_publisher(self):
        @contextlib.contextmanager
        def outage():
            InMemoryPublisher.failing = True
            yield
            InMemoryPublisher.failing = False

        yield InMemoryPublisher(allow_in_memory=True), outage

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


def delete_queues(url, *queues):
    """Delete ``queues`` and their exchanges from the broker at ``url``."""
    with Connection(url) as conn:
        channel = conn.default_channel
        for queue in queues:
            # Declared first: on Redis, kombu deletes only the bindings this
            # connection knows.
            bound = queue(channel)
            bound.declare()
            bound.delete()
            queue.exchange(channel).delete()


def read_queue(url, queue, count) -> list:
    """Read (and ack) ``count`` messages from ``queue``; fail after 5 s."""
    got = []
    with Connection(url) as conn:
        simple = conn.SimpleQueue(queue)
        for _ in range(count):
            message = simple.get(timeout=5)
            got.append(message)
            message.ack()
        simple.close()
    return got


def queue_length(url, queue) -> int:
    with Connection(url) as conn:
        return queue(conn.channel()).queue_declare().message_count


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
        delete_queues(self.url, self.queue)

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
        return [
            {
                "message_id": message.properties["message_id"],
                "type": message.headers["type"],
                "payload": message.payload,
                "headers": message.headers,
            }
            for message in read_queue(self.url, self.queue, count)
        ]

    def test_a_message_no_queue_is_bound_for_fails_and_the_next_goes_through(self):
        with self.make_publisher() as publisher:
            # Only "order" is bound: the broker would drop an invoice.
            with pytest.raises(PublishError, match="invoice"):
                publisher.publish(make_message(aggregatetype="invoice"))
            publisher.publish(make_message())

        [got] = self.receive(1)
        assert got["headers"]["aggregatetype"] == "order"

    def test_a_batch_goes_out_at_once_and_a_queue_holds_each_in_order(self):
        messages = [make_message(aggregateid=str(n)) for n in range(50)]
        with self.make_publisher() as publisher:
            assert publisher.publish_many(messages) == {}

        got = self.receive(50)
        assert [g["message_id"] for g in got] == [str(m.id) for m in messages]

    def refused_alone(self, bad) -> PublishError:
        """Publish ``bad`` in a batch between two messages; assert that it alone
        fails, and that the publisher goes on. Return why it failed."""
        before, after = make_message(), make_message()
        with self.make_publisher() as publisher:
            refused = publisher.publish_many([before, bad, after])
            # The same publisher goes on: the connection itself is fine.
            assert publisher.publish_many([make_message()]) == {}

        assert list(refused) == [bad.id]
        got = self.receive(3)
        assert [g["message_id"] for g in got[:2]] == [str(before.id), str(after.id)]
        assert isinstance(refused[bad.id], PublishError)
        return refused[bad.id]

    def test_an_unroutable_message_fails_alone_inside_a_batch(self):
        # Only "order" is bound.
        error = self.refused_alone(make_message(aggregatetype="invoice"))
        assert "routing key 'invoice'" in str(error)

    def test_a_broken_broker_fails_the_whole_batch(self):
        messages = [make_message(), make_message()]
        with self.make_broken_publisher() as publisher:
            refused = publisher.publish_many(messages)
        assert set(refused) == {m.id for m in messages}
        assert all(isinstance(e, PublishError) for e in refused.values())


class TestKombuPublisherOnRedis(KombuContract):
    url = REDIS_URL
    dead_url = DEAD_REDIS_URL

    def test_a_fanout_exchange_fails_since_redis_fans_out_without_a_queue(self):
        fanout = Exchange(f"{self.exchange.name}-fanout", type="fanout")
        queue = Queue(fanout.name, fanout)
        publisher = KombuPublisher(
            url=self.url,
            exchange=fanout.name,
            exchange_type="fanout",
            declare=(queue,),
        )
        try:
            with publisher, pytest.raises(PublishError, match="fanout"):
                publisher.publish(make_message())
        finally:
            delete_queues(self.url, queue)

    def test_a_batch_reads_the_bindings_once_and_leaves_the_channel_as_it_was(
        self, monkeypatch
    ):
        # kombu would read them again per message, a round trip each
        # (docs/benchmarks.md, "Outbox relay").
        reads = []
        read_bindings = redis_transport.Channel.get_table

        def counted(channel, exchange):
            reads.append(exchange)
            return read_bindings(channel, exchange)

        monkeypatch.setattr(redis_transport.Channel, "get_table", counted)
        messages = [make_message(aggregateid=str(n)) for n in range(20)]
        with self.make_publisher() as publisher:
            assert publisher.publish_many(messages) == {}
            channel = publisher.producer.channel

        assert reads == [self.exchange.name]
        assert "get_table" not in vars(channel)
        assert len(self.receive(20)) == 20


class TestKombuPublisherOnRabbitMQ(KombuContract):
    url = AMQP_URL
    dead_url = DEAD_AMQP_URL

    def test_publisher_confirms_are_on(self):
        with self.make_publisher() as publisher:
            publisher.publish(make_message())
            # RabbitMQ refuses transactions on a channel in confirm mode.
            with pytest.raises(PreconditionFailed, match="confirm"):
                publisher.producer.channel.tx_select()
        self.receive(1)

    def test_a_refused_publish_on_a_live_broker_raises(self):
        # The exchange does not exist: RabbitMQ closes the channel, and with
        # confirms the publish hears of it instead of returning as if sent.
        with self.make_publisher() as publisher:
            publisher._producer()
            publisher.exchange = Exchange("outbox-test-does-not-exist", type="topic")
            with pytest.raises(PublishError):
                publisher.publish(make_message())

    @pytest.mark.parametrize(
        "fields",
        [
            # 200 characters fit the column; 400 bytes do not fit a routing key.
            {"aggregatetype": "é" * 200},
            {"headers": {"k" * 300: "v"}},  # a table's keys: at most 255 bytes
            {"headers": {"n": 2**70}},  # AMQP's integers have 64 bits
            # Headers go in one frame (128 KiB): RabbitMQ closed the
            # connection, and the whole batch failed with them.
            {"headers": {"note": "x" * 200_000}},
        ],
        ids=["long-routing-key", "long-header-key", "huge-int-header", "huge-headers"],
    )
    def test_a_message_amqp_cannot_encode_fails_alone_inside_a_batch(self, fields):
        bad = make_message()
        for name, value in fields.items():
            setattr(bad, name, value)
        # The broker never saw it: the channel numbers the next publishes right.
        assert "AMQP cannot encode" in str(self.refused_alone(bad))

    def test_headers_too_deep_for_amqp_fail_alone_inside_a_batch(self):
        # Stored before record() refused them: py-amqp's encoder ran out of
        # stack, and the whole batch failed with them, the connection reset.
        bad = make_message()
        bad.headers = {"trail": nested(MAX_DEPTH - 1)}

        error = self.refused_alone(bad)

        assert "AMQP cannot encode" in str(error)
        assert "nested too deeply" in str(error)

    def test_headers_that_fit_a_frame_are_published(self):
        message = make_message()
        message.headers = {**message.headers, "note": "x" * 129_000}
        with self.make_publisher() as publisher:
            assert publisher.publish_many([message]) == {}

        [got] = self.receive(1)
        assert got["headers"]["once-headers"]["note"] == "x" * 129_000

    def test_the_largest_headers_one_frame_holds_are_published(self):
        # The frame is checked as py-amqp encoded it: bisect the note's length
        # to where the publisher starts refusing; one character less, the
        # broker takes the message and the connection stays open.
        def refused(length):
            message = make_message()
            message.headers = {**message.headers, "note": "x" * length}
            with self.make_publisher() as publisher:
                return message.id in publisher.publish_many([message])

        fits, over = 100_000, 140_000
        assert not refused(fits) and refused(over)
        while over - fits > 1:
            middle = (fits + over) // 2
            fits, over = (middle, over) if not refused(middle) else (fits, middle)
        with Connection(self.url) as conn:
            self.queue(conn.channel()).purge()  # what the bisection published

        message = make_message()
        message.headers = {**message.headers, "note": "x" * fits}
        with self.make_publisher() as publisher:
            assert publisher.publish_many([message]) == {}
            assert publisher.publish_many([make_message()]) == {}
        got = self.receive(2)
        assert got[0]["headers"]["once-headers"]["note"] == "x" * fits

    def test_headers_over_a_frame_fail_alone_in_a_batch_sent_in_many_writes(self):
        # Frames of 64 KiB and more on each side of it: the batch goes out in
        # several socket writes, none of which may carry a part of it.
        before = [make_message(payload={"note": "x" * 2_000}) for _ in range(60)]
        after = [make_message(payload={"note": "x" * 2_000}) for _ in range(60)]
        bad = make_message()
        bad.headers = {**bad.headers, "note": "x" * 200_000}
        with self.make_publisher() as publisher:
            refused = publisher.publish_many([*before, bad, *after])
            assert publisher.publish_many([make_message()]) == {}

        assert list(refused) == [bad.id]
        assert "AMQP cannot encode" in str(refused[bad.id])
        got = self.receive(121)
        assert [g["message_id"] for g in got[:120]] == [
            str(m.id) for m in [*before, *after]
        ]

    def test_a_body_over_the_brokers_max_message_size_fails_alone(self):
        # RabbitMQ closes the channel (PRECONDITION_FAILED) on a body over its
        # max_message_size (128 MiB by default): the whole batch sent with it
        # failed, on every attempt, until its messages went dead.
        bad = make_message(payload={"note": "x" * 128 * 1024 * 1024})
        error = self.refused_alone(bad)
        assert "message size" in str(error)

    def test_a_lost_connection_still_fails_the_whole_batch(self):
        bad = make_message(aggregatetype="é" * 200)
        messages = [make_message(), bad, make_message()]
        with self.cuttable_publisher() as (publisher, outage), publisher:
            publisher._producer()  # connected, then the link goes down
            with outage():
                refused = publisher.publish_many(messages)

        assert set(refused) == {m.id for m in messages}
        assert all(isinstance(e, PublishError) for e in refused.values())


class TestKombuPublisherDestinations:
    def test_by_default_a_durable_queue_named_after_the_exchange_takes_every_key(
        self,
    ):
        [queue] = KombuPublisher().destinations()
        assert (queue.name, queue.routing_key, queue.durable) == ("outbox", "#", True)
        assert (queue.exchange.name, queue.exchange.type) == ("outbox", "topic")
        [queue] = KombuPublisher(exchange="events").destinations()
        assert (queue.name, queue.exchange.name) == ("events", "events")

    def test_the_users_queues_replace_the_default_queue(self):
        mine = Queue("billing", Exchange("outbox", type="topic"), routing_key="order")
        assert KombuPublisher(declare=[mine]).destinations() == (mine,)

    def test_the_default_queue_can_be_turned_off(self):
        assert KombuPublisher(default_queue=False).destinations() == ()
        # Only a topic exchange has a binding key for every routing key.
        assert KombuPublisher(exchange_type="direct").destinations() == ()


@pytest.mark.django_db
@pytest.mark.usefixtures("steady_backoff")
@pytest.mark.parametrize("url", [REDIS_URL, AMQP_URL], ids=["redis", "rabbitmq"])
class TestRecordedEventsAreHeldOrNotPublished:
    """Through record() and drain(): "published" means a queue holds the event."""

    @pytest.fixture(autouse=True)
    def _names(self, url, settings):
        # A failed event must not come due again within the drain: with a
        # short jittered backoff a slow broker would see it fail twice.
        settings.OUTBOX = {**settings.OUTBOX, "BACKOFF_BASE": 3600}
        self.url = url
        self.exchange = Exchange(
            f"outbox-test-{uuid.uuid4().hex[:8]}", type="topic", durable=True
        )
        # The queue the default one would be, to read it and delete it.
        self.default_queue = Queue(self.exchange.name, self.exchange, routing_key="#")
        self.invoices = Queue(
            f"{self.exchange.name}-invoices", self.exchange, routing_key="invoice"
        )
        self.declared = [self.default_queue, self.invoices]
        yield
        delete_queues(url, *self.declared)

    def publisher(self, **options):
        return KombuPublisher(url=self.url, exchange=self.exchange.name, **options)

    def record(self, *aggregate_types) -> list[str]:
        with transaction.atomic():
            return [
                str(record(kind, 1, f"{kind}.created", {"kind": kind}))
                for kind in aggregate_types
            ]

    def test_without_consumer_queues_the_default_queue_holds_them(self, url):
        ids = self.record("order", "invoice")

        result = relay.drain(publisher=self.publisher())

        assert result.published == 2
        held = read_queue(url, self.default_queue, 2)
        assert [m.properties["message_id"] for m in held] == ids
        assert OutboxMessage.objects.published().count() == 2

    def test_event_headers_do_not_route_the_event(self, url):
        orders = Queue(
            f"{self.exchange.name}-orders", self.exchange, routing_key="order"
        )
        self.declared.append(orders)
        with transaction.atomic():
            # RabbitMQ would copy a message to the CC and BCC routing keys.
            record("order", 1, "order.created", {}, headers=TRANSPORT_HEADERS)
        publisher = self.publisher(default_queue=False, declare=[orders, self.invoices])

        assert relay.drain(publisher=publisher).published == 1

        [held] = read_queue(url, orders, 1)
        assert held.headers["once-headers"]["CC"] == ["invoice"]
        assert queue_length(url, self.invoices) == 0

    def test_with_nothing_bound_nothing_is_marked_published(self, url):
        self.record("order")

        result = relay.drain(publisher=self.publisher(default_queue=False))

        assert (result.published, result.failed) == (0, 1)
        row = OutboxMessage.objects.get()
        assert (row.state, row.attempts) == ("pending", 1)
        assert "order" in row.last_error
        assert "PublishError" in row.last_error

    def test_in_one_batch_only_the_unroutable_events_are_marked_failed(self, url):
        ids = self.record("invoice", "order", "invoice", "order", "invoice")
        publisher = self.publisher(default_queue=False, declare=[self.invoices])

        result = relay.drain(publisher=publisher)

        assert (result.batches, result.published, result.failed) == (1, 3, 2)
        held = read_queue(url, self.invoices, 3)
        assert [m.properties["message_id"] for m in held] == ids[::2]
        states = dict(OutboxMessage.objects.values_list("pk", "state"))
        assert [states[uuid.UUID(pk)] for pk in ids] == [
            "published",
            "pending",
            "published",
            "pending",
            "published",
        ]
        for failed in OutboxMessage.objects.filter(state="pending"):
            assert "routing key 'order'" in failed.last_error
            assert failed.published_at is None
        assert not OutboxMessage.objects.filter(state="published", last_error__gt="")

    def test_an_unroutable_event_fails_and_a_routable_one_is_held(self, url):
        order, invoice = self.record("order", "invoice")
        publisher = self.publisher(default_queue=False, declare=[self.invoices])

        result = relay.drain(publisher=publisher)

        assert (result.published, result.failed) == (1, 1)
        [held] = read_queue(url, self.invoices, 1)
        assert held.properties["message_id"] == invoice
        failed = OutboxMessage.objects.get(pk=order)
        assert (failed.state, failed.attempts) == ("pending", 1)
        assert "routing key 'order'" in failed.last_error
        assert OutboxMessage.objects.get(pk=invoice).state == "published"


@pytest.mark.django_db
@pytest.mark.usefixtures("steady_backoff")
def test_a_batch_marks_published_only_what_rabbitmq_confirmed():
    """A full queue that rejects publishes makes RabbitMQ nack them, for real:
    of one confirmed batch, only the acked messages are marked published."""
    exchange = Exchange(f"outbox-test-{uuid.uuid4().hex[:8]}", type="topic")
    full = Queue(
        exchange.name,
        exchange,
        routing_key="order",
        queue_arguments={"x-max-length": 2, "x-overflow": "reject-publish"},
    )
    with transaction.atomic():
        ids = [str(record("order", n, "order.created", {"n": n})) for n in range(5)]
    publisher = KombuPublisher(
        url=AMQP_URL, exchange=exchange.name, default_queue=False, declare=[full]
    )
    try:
        result = relay.drain(publisher=publisher)
        held = read_queue(AMQP_URL, full, 2)
    finally:
        delete_queues(AMQP_URL, full)

    assert (result.batches, result.published, result.failed) == (1, 2, 3)
    assert [m.properties["message_id"] for m in held] == ids[:2]
    states = dict(OutboxMessage.objects.values_list("pk", "state"))
    assert [states[uuid.UUID(pk)] for pk in ids] == ["published"] * 2 + ["pending"] * 3
    for refused in OutboxMessage.objects.filter(state="pending"):
        assert "nacked" in refused.last_error
        assert refused.published_at is None


@shared_task(name="outbox_tests.on_order_created")
def on_order_created(**event):
    """The task the CeleryTaskPublisher tests name (a worker would run it)."""


class TestCeleryTaskPublisher(PublisherContract):
    task_name = "outbox_tests.on_order_created"

    @pytest.fixture(autouse=True)
    def _queue(self):
        # Not declared here: Celery declares the queue it is given by name,
        # as this one, and sends through the default exchange, which puts the
        # message straight into the queue (on Redis, its list).
        name = f"outbox-test-tasks-{uuid.uuid4().hex[:8]}"
        self.queue = Queue(name, Exchange(name), routing_key=name)
        yield
        delete_queues(REDIS_URL, self.queue)

    def make_publisher(self, url=REDIS_URL, app=None):
        return CeleryTaskPublisher(
            tasks={"order.created": self.task_name},
            queue=self.queue.name,
            broker_url=url,
            app=app,
        )

    def make_broken_publisher(self):
        return self.make_publisher(DEAD_REDIS_URL)

    @contextlib.contextmanager
    def cuttable_publisher(self):
        with cuttable(REDIS_URL) as proxy:
            yield self.make_publisher(proxy.url), proxy.cut

    def receive(self, count):
        got = []
        for message in read_queue(REDIS_URL, self.queue, count):
            # The publisher's, whatever the event's headers say.
            assert message.headers["task"] == self.task_name
            assert message.headers["expires"] is None
            assert message.headers["eta"] is None
            assert message.headers["retries"] == 0
            _args, kwargs, _embed = message.payload
            assert message.headers["id"] == kwargs["headers"]["id"]
            got.append(
                {
                    "message_id": message.headers["id"],  # the task id
                    "type": kwargs["event_type"],
                    "payload": kwargs["payload"],
                    "headers": kwargs["headers"],
                }
            )
        return got

    def test_a_queue_celery_may_not_create_fails_instead_of_dropping(self):
        app = Celery(set_as_current=False)
        app.conf.task_create_missing_queues = False
        with (
            self.make_publisher(app=app) as publisher,
            pytest.raises(PublishError, match=self.queue.name),
        ):
            publisher.publish(make_message())

    def test_a_task_no_worker_knows_fails_instead_of_being_discarded(self):
        publisher = self.make_publisher()
        publisher.tasks = {"order.created": "outbox_tests.on_order_creatd"}
        with (
            publisher,
            pytest.raises(OutboxConfigurationError, match="not registered"),
        ):
            publisher.publish(make_message())
        assert queue_length(REDIS_URL, self.queue) == 0

    def test_tasks_of_another_codebase_are_sent_when_declared_remote(self):
        publisher = CeleryTaskPublisher(
            tasks={"order.created": "billing.on_order_created"},
            queue=self.queue.name,
            broker_url=REDIS_URL,
            remote_tasks=True,
        )
        with publisher:
            publisher.publish(make_message())
        [sent] = read_queue(REDIS_URL, self.queue, 1)
        assert sent.headers["task"] == "billing.on_order_created"

    def test_tasks_the_apps_own_autodiscovery_finds_are_known(self):
        # Packages and a module name given to autodiscover_tasks(): a worker
        # imports them at start, and so does the publisher before refusing.
        app = Celery(set_as_current=False)
        app.autodiscover_tasks(["tests.outbox.discovered"], related_name="jobs")
        publisher = CeleryTaskPublisher(
            tasks={"order.created": "outbox_tests.discovered_job"}, app=app
        )
        assert publisher.unregistered_tasks() == []

    def test_on_rabbitmq_each_task_waits_for_the_brokers_ack(self):
        app = Celery(set_as_current=False)
        app.conf.broker_transport_options = {"confirm_publish": False}
        with self.make_publisher(AMQP_URL, app=app) as publisher:
            assert publisher.connection.transport_options["confirm_publish"] is True

    @pytest.mark.parametrize("named", [True, False])
    def test_a_celery_queue_that_drops_its_tasks_is_refused(self, named):
        # task_queues declares the queue Celery sends to (given by name, or
        # the one task_routes picks): a TTL there expires events the relay
        # marked published before any worker takes them.
        app = Celery(set_as_current=False)
        app.conf.task_queues = [
            Queue("events", Exchange("events"), routing_key="events", message_ttl=60)
        ]
        app.conf.task_routes = {self.task_name: {"queue": "events"}}
        with pytest.raises(OutboxConfigurationError, match="message_ttl"):
            CeleryTaskPublisher(
                tasks={"order.created": self.task_name},
                queue="events" if named else None,
                app=app,
            )

    def test_a_celery_queue_that_keeps_its_tasks_passes(self):
        app = Celery(set_as_current=False)
        app.conf.task_queues = [Queue("events", Exchange("events"), "events")]
        tasks = {"order.created": self.task_name}
        CeleryTaskPublisher(tasks=tasks, queue="events", app=app)
        CeleryTaskPublisher(tasks=tasks, app=app)  # the default queue
        CeleryTaskPublisher(tasks=tasks, queue="made-on-demand", app=app)

    def test_on_rabbitmq_each_task_is_persistent_whatever_the_apps_default(self):
        # task_default_delivery_mode = "transient" (a speed tuning) had the
        # broker keep the task in memory only: a broker restart dropped an
        # event the relay had marked published.
        app = Celery(set_as_current=False)
        app.conf.task_default_delivery_mode = "transient"
        try:
            with self.make_publisher(AMQP_URL, app=app) as publisher:
                publisher.publish(make_message())
            [sent] = read_queue(AMQP_URL, self.queue, 1)
        finally:
            delete_queues(AMQP_URL, self.queue)
        assert sent.properties["delivery_mode"] == 2

    def test_on_rabbitmq_a_publisher_recovers_after_a_lost_connection(self):
        # The producer kept the lost connection's channel: every later task
        # of the drain failed, "channel is None ... not bound".
        before, lost, after = make_message(), make_message(), make_message()
        try:
            with (
                cuttable(AMQP_URL) as proxy,
                self.make_publisher(proxy.url) as publisher,
            ):
                publisher.publish(before)
                with proxy.cut(), pytest.raises(PublishError):
                    publisher.publish(lost)
                publisher.publish(after)

            got = read_queue(AMQP_URL, self.queue, 2)
            assert [m.headers["id"] for m in got] == [str(before.id), str(after.id)]
        finally:
            delete_queues(AMQP_URL, self.queue)

    def test_on_rabbitmq_a_task_the_broker_refuses_fails_alone(self):
        # Headers over a frame: RabbitMQ closes the connection (FRAME_ERROR),
        # and every later task of the drain failed with it.
        before, bad, after = make_message(), make_message(), make_message()
        bad.headers = {**bad.headers, "note": "x" * 200_000}
        try:
            with self.make_publisher(AMQP_URL) as publisher:
                refused = publisher.publish_many([before, bad, after])

            assert list(refused) == [bad.id]
            got = read_queue(AMQP_URL, self.queue, 2)
            assert [m.headers["id"] for m in got] == [str(before.id), str(after.id)]
        finally:
            delete_queues(AMQP_URL, self.queue)

    def test_a_batch_to_a_stalled_broker_waits_no_longer_than_the_lease_covers(
        self,
    ):
        # A broker that takes connections and never answers (stalled, or
        # blocked by a resource alarm): each task of a batch waited its own
        # connect and ack, so a batch outlived its lease by far (500 tasks x
        # 30 s), and other relays claimed and published it again meanwhile.
        app = Celery(set_as_current=False)
        app.conf.broker_connection_timeout = 0.3
        with contextlib.closing(socket.create_server(("127.0.0.1", 0))) as hole:
            held = []
            threading.Thread(
                target=lambda: held.extend(iter(hole.accept, None)), daemon=True
            ).start()
            port = hole.getsockname()[1]
            publisher = CeleryTaskPublisher(
                tasks={"order.created": "billing.on_order_created"},
                broker_url=f"amqp://127.0.0.1:{port}//",
                app=app,
                remote_tasks=True,
                confirm_timeout=1,
            )
            messages = [make_message() for _ in range(10)]
            with publisher:
                started = time.monotonic()
                refused = publisher.publish_many(messages)
                took = time.monotonic() - started

        assert set(refused) == {m.id for m in messages}
        # One connect may start before the window closes.
        assert took < publisher.longest_wait() + 0.3 + 0.5

    def test_an_event_type_without_a_task_fails_loudly(self):
        with (
            self.make_publisher() as publisher,
            pytest.raises(OutboxConfigurationError, match=r"order\.shipped"),
        ):
            publisher.publish(make_message(type="order.shipped"))


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), "30"])
def test_a_confirm_timeout_that_cannot_wait_for_the_broker_is_refused(timeout):
    with pytest.raises(OutboxConfigurationError, match="confirm_timeout"):
        KombuPublisher(url=AMQP_URL, confirm_timeout=timeout)


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), "30"])
def test_a_celery_publisher_that_cannot_wait_for_the_ack_is_refused(timeout):
    with pytest.raises(OutboxConfigurationError, match="confirm_timeout"):
        CeleryTaskPublisher(tasks={}, confirm_timeout=timeout)


@pytest.mark.parametrize("remote", ["false", 0, None])
def test_remote_tasks_must_be_a_boolean(remote):
    with pytest.raises(OutboxConfigurationError, match="remote_tasks"):
        CeleryTaskPublisher(tasks={}, remote_tasks=remote)


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), "5"])
def test_a_connect_timeout_no_connection_can_meet_is_refused(timeout):
    with pytest.raises(OutboxConfigurationError, match="connect_timeout"):
        KombuPublisher(url=AMQP_URL, connect_timeout=timeout)


@pytest.mark.parametrize("default", ["false", 0, None])
def test_default_queue_must_be_a_boolean(default):
    with pytest.raises(OutboxConfigurationError, match="default_queue"):
        KombuPublisher(url=AMQP_URL, default_queue=default)


@pytest.mark.parametrize("confirm", [False, 0, None])
def test_publisher_confirms_cannot_be_turned_off(confirm):
    with pytest.raises(OutboxConfigurationError, match="confirm_publish"):
        KombuPublisher(url=AMQP_URL, confirm_publish=confirm)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("steady_backoff")
def test_an_event_for_a_misspelled_task_stays_pending_instead_of_being_lost():
    with transaction.atomic():
        record("order", 1, "order.created", {"sku": "BOOK-1"})
    publisher = CeleryTaskPublisher(
        tasks={"order.created": "shop.reserve_stok"}, broker_url=REDIS_URL
    )

    result = relay.drain(publisher=publisher)

    assert (result.published, result.failed) == (0, 1)
    message = OutboxMessage.objects.get()
    assert message.state == "pending"
    assert "'shop.reserve_stok'" in message.last_error


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("BasePublisher", "base"),
        ("envelope", "base"),
        ("KombuPublisher", "kombu"),
        ("CeleryTaskPublisher", "celery"),
        ("InMemoryPublisher", "memory"),
    ],
)
def test_a_publisher_has_one_dotted_path_per_module_and_keeps_the_short_one(
    name, module
):
    # OUTBOX["PUBLISHER"] strings written before the split keep working.
    assert import_string(f"outbox.publishers.{module}.{name}") is import_string(
        f"outbox.publishers.{name}"
    )


def test_task_modules_are_imported_once_whichever_app_asks_first():
    # The inbox's system check and this publisher share one record of the
    # imports: the second to ask does not run the app's imports (and with
    # them Django's checks) again.
    app = Celery(set_as_current=False)
    app.autodiscover_tasks(["tests.outbox.discovered"], related_name="jobs")
    imports = []
    import_default_modules = app.loader.import_default_modules

    def counted():
        imports.append(app)
        return import_default_modules()

    app.loader.import_default_modules = counted
    import_task_modules(app)  # as inbox.checks does
    publisher = CeleryTaskPublisher(
        tasks={"order.created": "outbox_tests.not_a_task"}, app=app
    )

    assert publisher.unregistered_tasks() == ["outbox_tests.not_a_task"]
    assert len(imports) == 1
