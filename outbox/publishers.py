"""Publishers: how the relay hands a message to the outside world.

A publisher is a context manager (the relay opens it once per drain) with one
required method, ``publish(message)``, which returns only once the broker has
taken the message and raises otherwise. Pick one with ``OUTBOX["PUBLISHER"]``
(a dotted path) and give it keyword arguments in ``OUTBOX["PUBLISHER_OPTIONS"]``.
"""

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from celery import Celery, current_app
from kombu import Connection, Exchange, Queue
from kombu.transport import virtual

from .exceptions import OutboxConfigurationError, PublishError

AMQP_SCHEMES = frozenset({"amqp", "amqps", "pyamqp"})


class BasePublisher:
    """Extension point: subclass it and implement ``publish()``."""

    def open(self) -> None:
        """Acquire what publishing needs (a connection); called once per drain."""

    def close(self) -> None:
        """Release what ``open()`` acquired."""

    def publish(self, message) -> None:
        """Hand over one ``OutboxMessage``; raise when the broker did not take it."""
        raise NotImplementedError(".publish() must be overridden.")

    def __enter__(self):
        self.open()
        return self

    def __exit__(self, *exc_info):
        self.close()


def envelope(message) -> tuple[object, dict]:
    """The body and headers every publisher sends, shaped like Debezium's router:
    the payload as the body, the event type and ids as headers."""
    headers = {
        **message.headers,
        "id": str(message.id),
        "type": message.type,
        "aggregatetype": message.aggregatetype,
        "aggregateid": message.aggregateid,
    }
    return message.payload, headers


class KombuPublisher(BasePublisher):
    """Publish to a broker through kombu: RabbitMQ or Redis. The kombu
    ``message_id`` is the outbox id; the routing key is the aggregate type, on
    a topic exchange.

    "Published" means a queue holds the message. On RabbitMQ every publish is
    confirmed and ``mandatory``: a message no queue is bound for comes back
    (basic.return) and the publish raises. On Redis, where kombu drops such a
    message without a word, the publish raises when no queue is bound for its
    routing key.

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
        transport_options: dict | None = None,
        connect_timeout: float = 5,
        declare: tuple = (),
        default_queue: bool = True,
    ):
        self.url = url
        self.exchange_name = exchange
        self.exchange_type = exchange_type
        self.confirm_publish = confirm_publish
        self.transport_options = transport_options or {}
        self.connect_timeout = connect_timeout
        self.declare = tuple(declare)
        self.default_queue = default_queue
        # kombu's Connection and Producer, made by open() and _producer().
        self.connection: Any = None
        self.producer: Any = None
        self._down_until = 0.0
        # Message id -> why the broker returned it; see _on_return().
        self._returned: dict[str, Exception] = {}

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
        if self.is_amqp():
            # The broker acks each publish, so "published" means it has it.
            options.setdefault("confirm_publish", self.confirm_publish)
        self.exchange = self.get_exchange()
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
            self.producer = self.connection.Producer(
                serializer="json",
                on_return=None if self._is_virtual() else self._on_return,
            )
            self.exchange(self.producer.channel).declare()
            for queue in self.destinations():
                queue(self.producer.channel).declare()
        return self.producer

    def _is_virtual(self) -> bool:
        # kombu's virtual transports (Redis, ...) route in the client: no
        # confirms, no basic.return, and a message no queue is bound for is
        # dropped.
        return isinstance(self.connection.transport, virtual.Transport)

    def _on_return(self, exception, exchange, routing_key, message):
        # py-amqp calls it while publish() waits for the confirm: RabbitMQ
        # sends the basic.return of a mandatory message before its ack.
        # (Without confirms nothing waits and a return goes unseen: W001.)
        self._returned[message.properties.get("message_id")] = exception

    def publish(self, message):
        try:
            self._send(message)
        except PublishError:
            raise  # no queue took it; the connection itself is fine
        except Exception as exc:
            # The next publish reconnects rather than reuse a broken channel.
            self._reset()
            raise PublishError(f"Broker refused {message.id}: {exc}") from exc

    def _send(self, message):
        body, headers = envelope(message)
        message_id = str(message.id)
        producer = self._producer()
        if self._is_virtual():
            self._require_binding(producer.channel, message.aggregatetype)
        producer.publish(
            body,
            exchange=self.exchange,
            routing_key=message.aggregatetype,
            message_id=message_id,
            headers=headers,
            delivery_mode=2,
            # So RabbitMQ returns a message no queue is bound for instead of
            # dropping it.
            mandatory=True,
            retry=False,
        )
        returned = self._returned.pop(message_id, None)
        if returned is not None:
            raise PublishError(
                f"No queue is bound to exchange {self.exchange_name!r} for "
                f"routing key {message.aggregatetype!r}: the broker returned "
                f"the message ({returned})."
            )

    def _require_binding(self, channel, routing_key):
        """Refuse what kombu's virtual transport (Redis) would drop silently:
        a message no queue is bound for."""
        exchange_type = channel.typeof(self.exchange_name)
        redis = self.connection.transport.driver_type == "redis"
        if exchange_type.type == "fanout" and redis:
            # kombu fans out on Redis with PUBLISH: listening consumers get the
            # message, and no queue keeps it for the others.
            raise PublishError(
                f"Exchange {self.exchange_name!r} is a fanout exchange on Redis: "
                "no queue would hold the message. Use a topic exchange."
            )
        # The lookup kombu's delivery makes; the bindings live in the broker
        # (a Redis set), so they include those other processes declared. A
        # queue deleted between this check and the put loses the message, as
        # it would lose it a moment later with the rest of its contents.
        table = channel.get_table(self.exchange_name)
        if not exchange_type.lookup(table, self.exchange_name, routing_key, None):
            raise PublishError(
                f"No queue is bound to exchange {self.exchange_name!r} for "
                f"routing key {routing_key!r}: the broker would drop the message."
            )

    def _reset(self):
        if self.connection is not None:
            with contextlib.suppress(Exception):  # it is broken already
                self.connection.release()
            self.open()
        self.producer = None


class CeleryTaskPublisher(BasePublisher):
    """Send each event as a Celery task, named by ``tasks[event_type]``.

    The task gets keyword arguments ``event_type``, ``aggregate_type``,
    ``aggregate_id``, ``payload`` and ``headers``; its task id is the outbox id.
    An event type without a task is a failed attempt, never a silent drop.

    Celery declares the queue it sends to (``queue``, else its default queue;
    a name it does not know is created, unless ``task_create_missing_queues``
    is off, and then the publish fails) and sends through the default
    exchange, which puts the message straight into that queue: on Redis too,
    no binding is needed and nothing is dropped. A ``task_routes`` entry that
    names an exchange and routing key instead of a queue, or a broadcast
    queue, gives that up: on Redis such a message can vanish unseen.
    """

    def __init__(
        self,
        *,
        tasks: dict[str, str] | None = None,
        queue: str | None = None,
        broker_url: str | None = None,
        app=None,
    ):
        self.tasks = dict(tasks or {})
        self.queue = queue
        self.broker_url = broker_url
        self.app = app
        # kombu's Connection, made by open().
        self.connection: Any = None

    def get_app(self) -> Celery:
        # The app this process configured, not the lazy proxy to it.
        return self.app or current_app._get_current_object()  # type: ignore[attr-defined]

    def open(self):
        app = self.get_app()
        self.connection = app.connection_for_write(self.broker_url)
        self.producer = app.amqp.Producer(self.connection)

    def close(self):
        if self.connection is not None:
            self.connection.release()
        self.connection = None

    def publish(self, message):
        try:
            name = self.tasks[message.type]
        except KeyError:
            raise OutboxConfigurationError(
                f"No task for event type {message.type!r} in the "
                "CeleryTaskPublisher's 'tasks'."
            ) from None
        payload, headers = envelope(message)
        try:
            # No retry loop here either: the relay's backoff is the policy.
            self.connection.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0
            )
            self.get_app().send_task(
                name,
                kwargs={
                    "event_type": message.type,
                    "aggregate_type": message.aggregatetype,
                    "aggregate_id": message.aggregateid,
                    "payload": payload,
                    "headers": headers,
                },
                task_id=str(message.id),
                headers=headers,
                queue=self.queue,
                producer=self.producer,
                retry=False,
            )
        except Exception as exc:
            raise PublishError(f"Broker refused {message.id}: {exc}") from exc


@dataclass(frozen=True)
class SentMessage:
    id: str
    type: str
    aggregate_type: str
    aggregate_id: str
    payload: object
    headers: dict
    attempts: int


class InMemoryPublisher(BasePublisher):
    """Keep published messages in ``InMemoryPublisher.sent``, for tests (in the
    spirit of ``django.core.mail.outbox``). ``InMemoryPublisher.reset()`` empties
    it; setting ``InMemoryPublisher.failing = True`` makes every publish fail."""

    sent: list[SentMessage] = []
    failing = False
    _lock = threading.Lock()

    def __init__(self, **options):
        self.options = options

    @classmethod
    def reset(cls):
        with cls._lock:
            cls.sent.clear()
            cls.failing = False

    def publish(self, message):
        if self.failing:
            raise PublishError(f"InMemoryPublisher.failing is set ({message.id}).")
        payload, headers = envelope(message)
        with self._lock:
            self.sent.append(
                SentMessage(
                    id=str(message.id),
                    type=message.type,
                    aggregate_type=message.aggregatetype,
                    aggregate_id=message.aggregateid,
                    payload=payload,
                    headers=headers,
                    attempts=message.attempts,
                )
            )
