"""The failure cases of a message consumer, run against the user's own one.

A message is handed to the consumer the way the outbox relay's
``CeleryTaskPublisher`` sends it (keyword arguments ``event_type``,
``aggregate_type``, ``aggregate_id``, ``payload`` and ``headers``, the
message id in the ``once-message-id`` header), then handed again as a broker
redelivers it. Crashes are simulated at every point where the consumer's work
becomes durable (see ``crashes.commit_points``).
"""

import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from idempotency.shared.headers import EVENT_HEADERS, MESSAGE_ID_HEADER

from . import guarantees as g
from .crashes import (
    AFTER,
    BEFORE,
    SimulatedCrash,
    commit_points,
    require_committed_transactions,
)


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


@dataclass
class Consumer:
    """A consumer as the checks drive it.

    ``consume`` is the task or function. ``payload`` is the event's payload,
    or a function returning one (called for each new message). ``effects()``
    returns a number that grows with the consumer's business effect.
    ``deliver(consume, message)`` hands a message over; by default with the
    relay's keyword arguments.
    """

    consume: Callable
    event_type: str
    payload: Any
    effects: Callable[[], Any]
    aggregate_type: str = ""
    deliver: Callable[[Callable, Message], Any] = call_with_task_kwargs

    def message(self) -> Message:
        payload = self.payload() if callable(self.payload) else self.payload
        return new_message(self.event_type, payload, self.aggregate_type)

    def hand(self, message: Message) -> Any:
        return self.deliver(self.consume, message)

    def describe(self, message: Message) -> str:
        return f"message {message.id} ({message.event_type}) to {_name(self.consume)}"


def check_redelivery(consumer: Consumer) -> None:
    """The broker delivers the same message twice: one effect."""
    __tracebackhide__ = True
    message = consumer.message()
    before = g.measure(consumer.effects)
    consumer.hand(message)
    applied = g.measure(consumer.effects)
    _require_an_effect(consumer, before, applied)
    consumer.hand(message)
    after = g.measure(consumer.effects)
    if after != applied:
        raise g.broken(
            g.REDELIVERED_MESSAGE,
            consumer.describe(message) + ", delivered twice",
            g.change(before, after, applied),
        )


def check_crash_before_ack(consumer: Consumer) -> None:
    """The consumer commits, the process dies before the ack, the broker
    redelivers the same message: one effect (failure case 4)."""
    __tracebackhide__ = True
    points, delta = _probe(consumer, "crash before ack")
    if not points.points:
        raise g.CannotCheck(
            "crash before ack",
            "the consumer made nothing durable in the database, so there is no "
            "commit to die after; does it write through another connection?",
        )
    last = len(points.points)
    problem = _crash_and_redeliver(consumer, last, AFTER, delta)
    if problem:
        raise g.broken(
            g.CRASH_BEFORE_ACK,
            f"the consumer's durable points: {points.describe()}",
            problem,
        )


def check_crash_anywhere(consumer: Consumer) -> None:
    """The process dies just before and just after each durable point of the
    consumer; after the redelivery the effect must be there exactly once."""
    __tracebackhide__ = True
    points, delta = _probe(consumer, "crash anywhere")
    count = len(points.points)
    problems = [
        problem
        for number in range(1, count + 1)
        for when in (BEFORE, AFTER)
        if (problem := _crash_and_redeliver(consumer, number, when, delta))
    ]
    if problems:
        raise g.broken(
            g.CRASH_ANYWHERE,
            f"the consumer's durable points: {points.describe()}",
            *problems,
        )


# Every case of a consumer, for ``pytest.mark.parametrize("check", ...)``.
CONSUMER_CHECKS = (check_redelivery, check_crash_before_ack, check_crash_anywhere)


def _probe(consumer: Consumer, case: str):
    """Deliver one message cleanly; return its durable points and its effect."""
    require_committed_transactions(case)
    message = consumer.message()
    before = g.measure(consumer.effects)
    with commit_points() as points:
        consumer.hand(message)
    after = g.measure(consumer.effects)
    _require_an_effect(consumer, before, after)
    return points, after - before


def _crash_and_redeliver(consumer, number, when, delta) -> str | None:
    """Die at one point, redeliver; describe what went wrong, if anything."""
    message = consumer.message()
    before = g.measure(consumer.effects)
    with commit_points(crash_at=number, when=when) as points, suppress(SimulatedCrash):
        consumer.hand(message)
    if points.crashed is None:
        # This run took a shorter path; the point does not exist here.
        return None
    consumer.hand(message)  # the broker redelivers the unacked message
    verdict = g.once_verdict(before, g.measure(consumer.effects), delta)
    return verdict and f"died {points.crashed}, then redelivered: {verdict}"


def _require_an_effect(consumer, before, after):
    if after == before:
        raise g.CannotCheck(
            "consumer",
            f"effects() stayed {before} when {_name(consumer.consume)} consumed "
            "a message; it must count the consumer's business effect.",
        )


def _name(consume) -> str:
    """A Celery task's name, or a function's."""
    return str(
        getattr(consume, "name", None) or getattr(consume, "__qualname__", consume)
    )
