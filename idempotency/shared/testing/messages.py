"""A message as a broker hands it to a consumer: the outbox relay's wire
format, which the inbox reads. The consumer checks deliver these, and the
outbox's capture makes them."""

import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from ..headers import EVENT_HEADERS, MESSAGE_ID_HEADER
from .guarantees import GuaranteeBroken, broken


@dataclass(frozen=True)
class Message:
    """One event as a broker delivers it; a redelivery has the same ``id``."""

    id: str
    event_type: str
    payload: Any
    aggregate_type: str = ""
    aggregate_id: str = ""
    headers: dict = field(default_factory=dict)

    def task_kwargs(self) -> dict:
        """The keyword arguments ``CeleryTaskPublisher`` gives the task."""
        return {
            "event_type": self.event_type,
            "aggregate_type": self.aggregate_type,
            "aggregate_id": self.aggregate_id,
            "payload": self.payload,
            "headers": self.headers,
        }


def new_message(event_type: str, payload: Any, aggregate_type: str = "") -> Message:
    """A message with a fresh id, headed as ``outbox.publishers.envelope()``
    heads every delivery."""
    message_id = str(uuid.uuid4())
    aggregate_type = aggregate_type or event_type.partition(".")[0]
    aggregate_id = str(payload.get("id", "")) if isinstance(payload, dict) else ""
    headers = {
        MESSAGE_ID_HEADER: message_id,
        "id": message_id,
        "type": event_type,
        "aggregatetype": aggregate_type,
        "aggregateid": aggregate_id,
        EVENT_HEADERS: {MESSAGE_ID_HEADER: message_id},
    }
    return Message(
        message_id, event_type, payload, aggregate_type, aggregate_id, headers
    )


def call_with_task_kwargs(consume: Callable, message: Message) -> Any:
    """Hand ``message`` to a Celery task or function as the relay's task gets it."""
    return consume(**message.task_kwargs())


# The library's own tasks: drains and kicks, never a unit of work's effect.
LIBRARY_TASKS = frozenset(
    {
        "outbox.relay",
        "inbox.purge",
        "webhooks.process_receipt",
        "webhooks.drain",
        "webhooks.enqueue_waiting",
        "idempotency.purge",
    }
)


@dataclass(frozen=True)
class TaskSent:
    """A Celery task a unit of work sent to a broker itself."""

    task: str
    args: Any
    kwargs: Any

    def describe(self) -> str:
        return (
            f"task {self.task} sent straight to the broker: {self.kwargs or self.args}"
        )


@contextmanager
def tasks_sent(ignore: Collection[str] = ()) -> Iterator[list[TaskSent]]:
    """Collect the Celery tasks the block sends (``delay()``,
    ``apply_async()``, ``send_task()``, a group's or a chain's), all of which
    go through ``Celery.send_task``; the library's own, ``ignore`` (a
    consumer's retry of itself) and those sent in a step (its outside call,
    given the step's key: the steps cases judge it) are left out. The tasks
    still go out."""
    from celery import Celery

    from ..steps import Steps  # models: loaded once Django is set up

    sent: list[TaskSent] = []
    send_task = Celery.send_task
    step = Steps.step

    def watched(app, name, args=None, kwargs=None, *rest, **options):
        if not _in_step.get() and name not in LIBRARY_TASKS | set(ignore):
            sent.append(TaskSent(name, args, kwargs))
        return send_task(app, name, args, kwargs, *rest, **options)

    with (
        mock.patch.object(Celery, "send_task", watched),
        mock.patch.object(Steps, "step", flagged(_in_step, step)),
    ):
        yield sent


# Set while a unit of work runs one of its steps, in the thread running it.
_in_step: ContextVar[bool] = ContextVar("once_in_step", default=False)


def flagged(flag: ContextVar[bool], function: Callable) -> Callable:
    """``function``, run with ``flag`` set in the calling thread: a watcher
    patched below it tells the calls made from inside it apart."""

    def run(*args, **kwargs):
        token = flag.set(True)
        try:
            return function(*args, **kwargs)
        finally:
            flag.reset(token)

    return run


def sent_straight(
    guarantee: str, subject: str, sent: list[TaskSent], work: str
) -> GuaranteeBroken:
    """The report of tasks a unit of work sent itself: none commits with
    ``work``, so a death on either side of its commit doubles or loses it."""
    return broken(
        guarantee,
        subject,
        *(each.describe() for each in sent),
        f"a task sent there cannot commit with {work}: record() an outbox "
        "event in its transaction instead; the relay publishes it once that "
        "commits",
    )
