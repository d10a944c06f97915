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
from urllib.parse import urlsplit

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
    """Publish to a broker through kombu: RabbitMQ (with publisher confirms) or
    Redis. The kombu ``message_id`` is the outbox id; the routing key is the
    aggregate type, on a topic exchange."""

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
    ):
        self.url = url
        self.exchange_name = exchange
        self.exchange_type = exchange_type
        self.confirm_publish = confirm_publish
        self.transport_options = transport_options or {}
        self.connect_timeout = connect_timeout
        # Queues to declare (and bind) before publishing, kombu.Queue objects.
        self.declare = tuple(declare)
        self.connection = None
        self.producer = None
        self._down_until = 0.0

    def get_url(self) -> str:
        if self.url:
            return self.url
        from celery import current_app

        return current_app.conf.broker_url

    def is_amqp(self) -> bool:
        return urlsplit(self.get_url()).scheme.split("+")[0] in AMQP_SCHEMES

    def open(self):
        from kombu import Connection, Exchange

        options = dict(self.transport_options)
        if self.is_amqp():
            # The broker acks each publish, so "published" means it has it.
            options.setdefault("confirm_publish", self.confirm_publish)
        self.exchange = Exchange(
            self.exchange_name, type=self.exchange_type, durable=True
        )
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
            self.producer = self.connection.Producer(serializer="json")
            self.exchange(self.producer.channel).declare()
            for queue in self.declare:
                queue(self.producer.channel).declare()
        return self.producer

    def publish(self, message):
        body, headers = envelope(message)
        try:
            self._producer().publish(
                body,
                exchange=self.exchange,
                routing_key=message.aggregatetype,
                message_id=str(message.id),
                headers=headers,
                delivery_mode=2,
                retry=False,
            )
        except Exception as exc:
            # The next publish reconnects rather than reuse a broken channel.
            self._reset()
            raise PublishError(f"Broker refused {message.id}: {exc}") from exc

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
        self.connection = None

    def get_app(self):
        if self.app is None:
            from celery import current_app

            return current_app._get_current_object()
        return self.app

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
