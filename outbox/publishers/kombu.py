"""A publisher that sends to a broker through kombu: RabbitMQ or Redis."""

import contextlib
import struct
import time
from typing import Any
from urllib.parse import urlsplit

from amqp.exceptions import ChannelError
from celery import current_app
from kombu import Connection, Exchange, Queue
from kombu.transport import virtual

from ..exceptions import OutboxConfigurationError, PublishError
from .base import BasePublisher, envelope, forgetful, timeout_seconds

AMQP_SCHEMES = frozenset({"amqp", "amqps", "pyamqp"})


class KombuPublisher(BasePublisher):
    """Publish to a broker through kombu: RabbitMQ or Redis. The kombu
    ``message_id`` is the outbox id; the routing key is the aggregate type, on
    a topic exchange.

    "Published" means a queue holds the message. On RabbitMQ every publish is
    confirmed and ``mandatory``: a message no queue is bound for comes back
    (basic.return) and fails. On Redis, where kombu drops such a message
    without a word, a message fails when no queue is bound for its routing key.

    A batch (``publish_many``) goes out at once: on RabbitMQ every message is
    sent, then the confirms and returns of all of them are awaited together
    (at most ``confirm_timeout`` seconds); on Redis the bindings are read
    once and the pushes go in one pipeline, routed by kombu as one by one.

    The queues in ``declare`` (``kombu.Queue`` objects) are declared and bound
    before the first publish. Without them, the default queue is declared:
    durable, named after the exchange and bound with ``#`` (every routing
    key), so events wait there until a consumer reads them. ``default_queue=False``
    declares nothing: the consumers' own queues must be bound, or every
    publish fails.
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        exchange: str = "outbox",
        exchange_type: str = "topic",
        confirm_publish: bool = True,
        confirm_timeout: float = 30,
        transport_options: dict | None = None,
        connect_timeout: float = 5,
        declare: tuple = (),
        default_queue: bool = True,
    ):
        self.url = url
        self.exchange_name = exchange
        self.exchange_type = exchange_type
        if confirm_publish is not True:
            # Without confirms a publish RabbitMQ never took, or returned
            # unroutable, would count as published.
            raise OutboxConfigurationError(
                "KombuPublisher confirm_publish cannot be turned off: "
                '"published" means the broker confirmed that a queue holds '
                "the message. Remove the option."
            )
        self.confirm_timeout = timeout_seconds(
            confirm_timeout, "KombuPublisher", "confirm_timeout"
        )
        self.transport_options = transport_options or {}
        # 0, a negative or a string would fail every connect, and so every
        # publish, until the messages went dead.
        self.connect_timeout = timeout_seconds(
            connect_timeout, "KombuPublisher", "connect_timeout"
        )
        self.declare = tuple(declare)
        for queue in self.declare:
            if why := forgetful(queue):
                raise OutboxConfigurationError(
                    f"KombuPublisher declare holds {why}: the relay would mark "
                    "events published that no consumer ever receives. Declare "
                    "durable kombu Queue objects that keep what they hold."
                )
        if not isinstance(default_queue, bool):
            # A string such as "false" is truthy: it would declare the
            # catch-all queue the setting meant to leave out.
            raise OutboxConfigurationError(
                f"KombuPublisher default_queue must be True or False, "
                f"not {default_queue!r}."
            )
        self.default_queue = default_queue
        # kombu's Connection and Producer, made by open() and _producer().
        self.connection: Any = None
        self.producer: Any = None
        self._down_until = 0.0
        # The delivery tag of the last publish on the producer's channel: in
        # confirm mode RabbitMQ numbers a channel's publishes 1, 2, 3...
        self._delivery_tag = 0
        # Message id -> why the broker returned it; see _on_return().
        self._returned: dict[str, Exception] = {}

    def longest_wait(self) -> float:
        # A batch connects, then awaits all its confirms together.
        return self.connect_timeout + self.confirm_timeout

    def get_url(self) -> str:
        if self.url:
            return self.url
        return current_app.conf.broker_url

    def is_amqp(self) -> bool:
        return urlsplit(self.get_url()).scheme.split("+")[0] in AMQP_SCHEMES

    def get_exchange(self):
        return Exchange(self.exchange_name, type=self.exchange_type, durable=True)

    def destinations(self) -> tuple:
        """The queues declared and bound before the first publish."""
        if self.declare or not self.default_queue or self.exchange_type != "topic":
            # Only a topic exchange has a catch-all binding key.
            return self.declare
        return (
            Queue(
                self.exchange_name,
                self.get_exchange(),
                routing_key="#",
                durable=True,
            ),
        )

    def open(self):
        options = dict(self.transport_options)
        # Confirms are ours to select and await (see _Confirms): py-amqp's own
        # would wait for each message before sending the next.
        options.pop("confirm_publish", None)
        self.exchange = self.get_exchange()
        # A producer of an earlier connection would publish where this one
        # never hears the confirms.
        self.producer = None
        self.connection = Connection(
            self.get_url(),
            transport_options=options,
            connect_timeout=self.connect_timeout,
        )

    def close(self):
        if self.connection is not None:
            self.connection.release()
        self.connection = self.producer = None

    def _producer(self):
        if self.producer is None:
            if time.monotonic() < self._down_until:
                # It just failed to connect: fail the rest of the batch fast
                # instead of waiting a connect timeout per message.
                raise ConnectionError("the broker was unreachable a moment ago")
            # Connect now, once, without kombu's retry loop: the relay's
            # backoff is the retry policy, and it never sleeps holding rows.
            try:
                self.connection.ensure_connection(
                    max_retries=1, interval_start=0, interval_step=0
                )
            except Exception:
                self._down_until = time.monotonic() + 1.0
                raise
            producer = self.connection.Producer(
                serializer="json",
                on_return=None if self._is_virtual() else self._on_return,
            )
            self.exchange(producer.channel).declare()
            for queue in self.destinations():
                queue(producer.channel).declare()
            if not self._is_virtual():
                # The broker acks each publish, so "published" means it has it.
                producer.channel.confirm_select()
                self._delivery_tag = 0
            self.producer = producer
        return self.producer

    def _is_virtual(self) -> bool:
        # kombu's virtual transports (Redis, ...) route in the client: no
        # confirms, no basic.return, and a message no queue is bound for is
        # dropped.
        return isinstance(self.connection.transport, virtual.Transport)

    def _on_return(self, exception, exchange, routing_key, message):
        # py-amqp calls it while the batch waits for its confirms: RabbitMQ
        # sends the basic.return of a mandatory message before its ack.
        self._returned[message.properties.get("message_id")] = exception

    def publish(self, message):
        refused = self.publish_many([message])
        if message.id in refused:
            raise refused[message.id]

    def publish_many(self, messages):
        refused: dict = {}
        # Retries after a channel error end here (see _publish_confirmed()).
        deadline = time.monotonic() + self.confirm_timeout
        try:
            producer = self._producer()
            if self._is_virtual():
                self._publish_routed(producer, messages, refused)
            else:
                self._publish_confirmed(producer, messages, refused, deadline)
        except PublishError as exc:
            # No queue takes any of them; the connection itself is fine.
            for message in messages:
                refused.setdefault(message.id, exc)
        except Exception as exc:
            # Some may have reached a queue: failed all the same, so they go
            # again (at least once). The next publish reconnects rather than
            # reuse a broken channel.
            self._reset()
            for message in messages:
                error = PublishError(f"Broker refused {message.id}: {exc}")
                error.__cause__ = exc
                refused.setdefault(message.id, error)
        return refused

    def _send(self, producer, message):
        body, headers = envelope(message)
        producer.publish(
            body,
            exchange=self.exchange,
            routing_key=message.aggregatetype,
            message_id=str(message.id),
            headers=headers,
            delivery_mode=2,
            # So RabbitMQ returns a message no queue is bound for instead of
            # dropping it.
            mandatory=True,
            retry=False,
        )

    def _publish_confirmed(self, producer, messages, refused, deadline, wait=None):
        """RabbitMQ: send every message, then await all their confirms (for
        ``wait`` seconds, confirm_timeout when None)."""
        sent = {}
        unsettled = []
        # Listening from the first publish: py-amqp may read acks while it
        # sends the next message.
        with _Confirms(producer.channel) as confirms:
            amqp_connection = self.connection.connection
            with _CoalescedWrites(
                amqp_connection.transport,
                # py-amqp's, as negotiated with the broker (none elsewhere).
                getattr(amqp_connection, "frame_max", None),
            ) as writes:
                for message in messages:
                    writes.next_message()
                    try:
                        self._send(producer, message)
                    except _FrameTooLarge as exc:
                        # RabbitMQ would close the connection (FRAME_ERROR),
                        # failing every message sent with this one.
                        refused[message.id] = PublishError(
                            f"AMQP cannot encode {message.id}: its properties "
                            f"take a frame of {exc.size} bytes, over the "
                            f"{exc.frame_max} the broker allows (its headers "
                            "must fit one frame with the other properties)."
                        )
                        continue
                    except struct.error as exc:
                        # py-amqp packs a message's fields before it writes a
                        # frame of it: the broker never saw this one (nor
                        # numbered it), and the channel goes on.
                        refused[message.id] = PublishError(
                            f"AMQP cannot encode {message.id}: {exc} (a routing "
                            "key or header name over 255 bytes, an integer "
                            "over 64 bits)."
                        )
                        continue
                    except RecursionError:
                        # Headers stored before record() refused deep ones:
                        # py-amqp's encoder ran out of stack, before any
                        # frame was written; the batch goes on without it.
                        refused[message.id] = PublishError(
                            f"AMQP cannot encode {message.id}: its headers "
                            "are nested too deeply for py-amqp's encoder."
                        )
                        continue
                    self._delivery_tag += 1
                    sent[self._delivery_tag] = message
                    confirms.unconfirmed.add(self._delivery_tag)
            try:
                confirms.wait(self.connection, wait or self.confirm_timeout)
            except ChannelError:
                # RabbitMQ closed the channel on one message (a body over its
                # max_message_size): the ones it never confirmed go again one
                # by one, so that message alone fails, not its batch.
                if len(sent) < 2:
                    raise
                unsettled = [sent[tag] for tag in sorted(confirms.unconfirmed)]
            for tag in confirms.nacked:
                refused[sent[tag].id] = PublishError(
                    f"The broker nacked {sent[tag].id}: it did not take it."
                )
        for message in messages if self._returned else ():
            returned = self._returned.pop(str(message.id), None)
            if returned is not None:
                refused[message.id] = PublishError(
                    f"No queue is bound to exchange {self.exchange_name!r} for "
                    f"routing key {message.aggregatetype!r}: the broker returned "
                    f"the message ({returned})."
                )
        if unsettled:
            self._retry_alone(unsettled, refused, deadline)

    def _retry_alone(self, messages, refused, deadline):
        """Publish ``messages`` one by one on a new channel each time one
        closes it, until ``deadline``: LEASE covers one confirm_timeout."""
        self._reset()
        for message in messages:
            if time.monotonic() >= deadline:
                refused[message.id] = PublishError(
                    f"The broker closed the channel in {message.id}'s batch, "
                    "and no time was left to publish it alone."
                )
                continue
            try:
                # Each wait ends by the deadline too, so the batch still ends
                # within the lease's connect and confirm_timeout.
                left = max(0.001, deadline - time.monotonic())
                producer = self._producer()
                self._publish_confirmed(producer, [message], refused, deadline, left)
            except Exception as exc:
                self._reset()
                error = PublishError(f"Broker refused {message.id}: {exc}")
                error.__cause__ = exc
                refused[message.id] = error

    def _publish_routed(self, producer, messages, refused):
        """Redis: check each routing key against one read of the bindings,
        then push what is bound in one pipeline."""
        channel = producer.channel
        exchange_type = channel.typeof(self.exchange_name)
        if exchange_type.type == "fanout" and self._is_redis():
            # kombu fans out on Redis with PUBLISH: listening consumers get the
            # message, and no queue keeps it for the others.
            raise PublishError(
                f"Exchange {self.exchange_name!r} is a fanout exchange on Redis: "
                "no queue would hold the message. Use a topic exchange."
            )
        # The bindings live in the broker (a Redis set), so they include those
        # other processes declared. A queue deleted between this read and the
        # pipeline loses its messages, as it would lose them a moment later
        # with the rest of its contents.
        table = channel.get_table(self.exchange_name)
        bound = {}
        routed = []
        for message in messages:
            key = message.aggregatetype
            if key not in bound:
                bound[key] = bool(
                    exchange_type.lookup(table, self.exchange_name, key, None)
                )
            if bound[key]:
                routed.append(message)
            else:
                refused[message.id] = PublishError(
                    f"No queue is bound to exchange {self.exchange_name!r} for "
                    f"routing key {key!r}: the broker would drop the message."
                )
        if not routed:
            return
        # kombu routes each message as publish() would, on the bindings just
        # read, and its Redis batch (kombu 5.7+; before, a push per message)
        # sends the pushes in one pipeline. A failed pipeline raises: delivery
        # uncertain, every message fails.
        batch = getattr(producer, "batch", contextlib.nullcontext)
        with self._routing_on(channel, table), batch():
            for message in routed:
                self._send(producer, message)

    def _routing_on(self, channel, table):
        """Have kombu route this batch on ``table``, the bindings its check read.

        kombu's virtual channel (5.x, up to 5.7 at least) reads an exchange's
        bindings again for every message it routes: ``Channel._lookup`` calls
        ``get_table``, on Redis an SMEMBERS round trip outside the pipeline,
        even inside ``Producer.batch()``. kombu has no option to route a batch
        on one read, so ``get_table`` is bound on this channel for the batch:
        the Redis relay drains over twice as fast with it (docs/benchmarks.md,
        "Outbox relay"), and the check and the routing see the same bindings.
        """
        return _bindings_read(channel, self.exchange_name, table)

    def _is_redis(self) -> bool:
        return self.connection.transport.driver_type == "redis"

    def _reset(self):
        if self.connection is not None:
            with contextlib.suppress(Exception):  # it is broken already
                self.connection.release()
            self.open()
        self.producer = None
        self._returned.clear()


class _Confirms:
    """The acks and nacks of a channel's publishes while a batch is sent and
    awaited (RabbitMQ numbers a channel's publishes from 1)."""

    def __init__(self, channel):
        self.channel = channel
        self.unconfirmed: set[int] = set()
        self.nacked: set[int] = set()

    def __enter__(self):
        self.channel.events["basic_ack"].add(self._ack)
        self.channel.events["basic_nack"].add(self._nack)
        return self

    def __exit__(self, *exc_info):
        self.channel.events["basic_ack"].discard(self._ack)
        self.channel.events["basic_nack"].discard(self._nack)

    def wait(self, connection, timeout: float) -> None:
        """Read from the broker until every publish is acked or nacked (their
        basic.returns arrive on the way); raise after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self.unconfirmed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"{len(self.unconfirmed)} publishes unconfirmed after {timeout} s"
                )
            connection.drain_events(timeout=remaining)

    def _settle(self, tag, multiple) -> set[int]:
        done = {t for t in self.unconfirmed if t <= tag} if multiple else {tag}
        self.unconfirmed.difference_update(done)
        return done

    def _ack(self, tag, multiple):
        self._settle(tag, multiple)

    def _nack(self, tag, multiple):
        self.nacked.update(self._settle(tag, multiple))


@contextlib.contextmanager
def _bindings_read(channel, exchange: str, table):
    """Have kombu route to ``exchange`` on ``table`` for a while (see
    ``KombuPublisher._routing_on()``): an instance attribute over the channel's
    ``get_table``, removed on the way out."""
    get_table = channel.get_table

    def read(name):
        return table if name == exchange else get_table(name)

    channel.get_table = read
    try:
        yield
    finally:
        del channel.get_table  # the class's method again


# A socket write per WRITE_CHUNK bytes of frames instead of one per frame.
# Small enough that the broker works on a chunk while the next is encoded.
WRITE_CHUNK = 64 * 1024


class _FrameTooLarge(Exception):
    def __init__(self, size: int, frame_max: int):
        super().__init__(size, frame_max)
        self.size = size
        self.frame_max = frame_max


class _CoalescedWrites:
    """Send the frames py-amqp writes through ``transport`` in chunks of
    WRITE_CHUNK bytes. py-amqp sends each frame with its own ``sendall``:
    a system call per message, the largest cost of a confirmed batch after
    encoding (docs/benchmarks.md, "Outbox relay"). Its frame writer calls
    ``transport._write``, which is swapped for the chunk's buffer here and
    put back on the way out; what is buffered when the batch fails is
    dropped, and the publisher reconnects.

    A frame over ``frame_max`` (a message's properties, its headers among
    them, travel in one frame) fails its message with _FrameTooLarge before
    it is buffered, and the message's frames buffered before it (its method
    frame) are dropped with it: the broker never sees it. Checked here on the
    frame py-amqp encoded, it costs nothing per message, where encoding the
    headers a second time to measure them took a twentieth of the relay's
    CPU (4 of 80 microseconds a message, measured side by side on a
    5,000-message drain when this changed; the relay's CPU per message is in
    docs/benchmarks.md, "Outbox relay")."""

    def __init__(self, transport, frame_max: int | None):
        self.transport = transport
        self.frame_max = frame_max
        self.write = transport._write
        self.pending = bytearray()
        self.message_start = 0  # where the message being sent begins

    def __enter__(self):
        self.transport._write = self._buffer
        return self

    def __exit__(self, exc_type, *exc_info):
        if "_write" in type(self.transport).__dict__:
            del self.transport._write  # the class's method again (SSL)
        else:
            self.transport._write = self.write  # the socket's sendall (TCP)
        if exc_type is None and self.pending:
            self.write(self.pending)

    def next_message(self):
        """Called before each message: what waits is written out here, between
        messages, so a message's frames are all sent or all dropped."""
        if len(self.pending) >= WRITE_CHUNK:
            self.write(self.pending)
            self.pending.clear()
        self.message_start = len(self.pending)

    def _buffer(self, frame):
        if self.frame_max and len(frame) > self.frame_max:
            del self.pending[self.message_start :]
            raise _FrameTooLarge(len(frame), self.frame_max)
        self.pending.extend(frame)  # a copy: py-amqp reuses the frame's memory
