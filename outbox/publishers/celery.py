"""A publisher that sends each event as a Celery task."""

import contextlib
import time
from typing import Any

from celery import Celery, current_app

from idempotency.shared.workers import import_task_modules

from ..exceptions import OutboxConfigurationError, PublishError
from .base import BasePublisher, envelope, forgetful, timeout_seconds


class CeleryTaskPublisher(BasePublisher):
    """Send each event as a Celery task, named by ``tasks[event_type]``.

    The task gets keyword arguments ``event_type``, ``aggregate_type``,
    ``aggregate_id``, ``payload`` and ``headers`` (the message's headers, see
    ``envelope()``); its task id is the outbox id. The task name, expiry and
    queue are the publisher's alone: the event's headers are sent in their own
    namespace, never beside Celery's.
    An event type without a task is a failed attempt, never a silent drop;
    so is a task name this process's Celery app does not know, which a worker
    would discard ("Received unregistered task"). When the tasks live in
    another codebase's workers, say so with ``remote_tasks=True``. On
    RabbitMQ each task waits for the broker's ack; a batch's tasks wait at
    most ``confirm_timeout`` seconds in all, and those left when it runs out
    fail unsent (the lease covers that wait, not one per task).

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
        remote_tasks: bool = False,
        confirm_timeout: float = 30,
    ):
        self.tasks = dict(tasks or {})
        # Checked here, in the running relay too: a list or a number where a
        # name belongs crashed the system check, or (remote_tasks) passed it.
        if not_names := [
            f"{event!r}: {name!r}"
            for event, name in self.tasks.items()
            if not (_is_name(event) and _is_name(name))
        ]:
            raise OutboxConfigurationError(
                "CeleryTaskPublisher tasks must map event types to task names, "
                f"both non-empty strings, not {', '.join(not_names[:3])}."
            )
        self.queue = queue
        self.broker_url = broker_url
        self.app = app
        if not isinstance(remote_tasks, bool):
            # A string such as "false" is truthy: it would switch the check off.
            raise OutboxConfigurationError(
                f"CeleryTaskPublisher remote_tasks must be True or False, "
                f"not {remote_tasks!r}."
            )
        self.remote_tasks = remote_tasks
        self.confirm_timeout = timeout_seconds(
            confirm_timeout, "CeleryTaskPublisher", "confirm_timeout"
        )
        if not self.tasks:
            # With nowhere to deliver, every event would fail "no task" and
            # go dead hours later, under a relay that looked healthy.
            raise OutboxConfigurationError(
                "CeleryTaskPublisher needs tasks: a mapping of event types to "
                "the task names to send them as, such as "
                "{'order.created': 'shop.reserve_stock'}."
            )
        for name in dict.fromkeys(self.tasks.values()):
            queue = self._queue_for(name)
            if queue is not None and (why := forgetful(queue)):
                raise OutboxConfigurationError(
                    f"CeleryTaskPublisher sends {name!r} to {why}: the relay "
                    "would mark events published that no worker ever runs. "
                    "Send them to a durable queue that keeps what it holds."
                )
        # kombu's Connection, made by open().
        self.connection: Any = None

    def _queue_for(self, name: str):
        """The queue Celery sends task ``name`` to: ``queue``, else the one
        ``task_routes`` picks, else the default queue (as ``task_queues``
        declares it, or as Celery makes a missing one: durable)."""
        options = {"queue": self.queue} if self.queue else {}
        try:
            return self.get_app().amqp.router.route(options, name, (), {})["queue"]
        except Exception:  # a queue Celery may not create: the publish says so
            return None

    def longest_wait(self) -> float:
        # A batch's tasks await their acks within one confirm_timeout.
        return self.confirm_timeout

    def get_app(self) -> Celery:
        # The app this process configured, not the lazy proxy to it.
        return self.app or current_app._get_current_object()  # type: ignore[attr-defined]

    def open(self):
        app = self.get_app()
        # On RabbitMQ, wait for the broker's ack of each task whatever the
        # project's broker_transport_options say (Redis ignores the option).
        self.connection = app.connection_for_write(
            self.broker_url, transport_options={"confirm_publish": True}
        )
        self.producer = app.amqp.Producer(self.connection)

    def close(self):
        if self.connection is not None:
            self.connection.release()
        self.connection = None

    def unregistered_tasks(self) -> list[str]:
        """The task names in ``tasks`` no worker of this codebase would run."""
        return [name for name in self.tasks.values() if not self._registered(name)]

    def _registered(self, name: str) -> bool:
        if self.remote_tasks:
            return True
        app = self.get_app()
        if name not in app.tasks:
            import_task_modules(app)
        return name in app.tasks

    def task_for(self, event_type: str) -> str:
        try:
            name = self.tasks[event_type]
        except KeyError:
            raise OutboxConfigurationError(
                f"No task for event type {event_type!r} in the "
                "CeleryTaskPublisher's 'tasks'."
            ) from None
        if not self._registered(name):
            raise OutboxConfigurationError(
                f"Task {name!r} (for event type {event_type!r}) is not "
                "registered in this Celery app: a worker would discard the "
                "message. Correct the name, or pass remote_tasks=True if "
                "another codebase's workers define it."
            )
        return name

    def publish(self, message):
        self._publish(message, self.confirm_timeout)

    def publish_many(self, messages):
        # One window for the whole batch, as its lease covers: a broker that
        # stalls (or blocks publishers on a resource alarm) made each task
        # wait its own connect and ack, and the batch outlived its lease.
        deadline = time.monotonic() + self.confirm_timeout
        refused = {}
        for message in messages:
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise PublishError(
                        f"Not sent: the broker took the batch's whole "
                        f"confirm_timeout ({self.confirm_timeout} s) before "
                        f"{message.id}."
                    )
                self._publish(message, remaining)
            except Exception as exc:  # that message's failed attempt
                refused[message.id] = exc
        return refused

    def _publish(self, message, confirm_timeout: float):
        name = self.task_for(message.type)
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
                # Persistent whatever task_default_delivery_mode says: a
                # transient task lives in the broker's memory, and a restart
                # would drop an event already marked published.
                delivery_mode=2,
                retry=False,
                confirm_timeout=confirm_timeout,
            )
        except Exception as exc:
            # The connection may be broken (a lost link; on RabbitMQ a frame
            # the broker refused closes it): the producer would keep its dead
            # channel and fail every later task of the drain.
            self._reset()
            raise PublishError(f"Broker refused {message.id}: {exc}") from exc

    def _reset(self):
        """Drop the connection; the next publish opens a new one."""
        with contextlib.suppress(Exception):  # it is broken already
            self.connection.release()
        self.open()


def _is_name(value) -> bool:
    return isinstance(value, str) and bool(value.strip())
