"""The failure cases of a message consumer, run against the user's own one.

A message is handed to the consumer the way the outbox relay's
``CeleryTaskPublisher`` sends it (keyword arguments ``event_type``,
``aggregate_type``, ``aggregate_id``, ``payload`` and ``headers``, the
message id in the ``once-message-id`` header), then handed again as a broker
redelivers it. Crashes are simulated at every point where the consumer's work
becomes durable (see ``crashes.commit_points``).
"""

from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from operator import attrgetter
from typing import Any

import pytest
from django.db import connections, router
from django.db.models import Max

from idempotency.shared.steps.models import StepRecord, UnitRecord
from idempotency.shared.testing import guarantees as g
from idempotency.shared.testing.clock import controlled_clock
from idempotency.shared.testing.compensations import abandon_after_steps
from idempotency.shared.testing.crashes import (
    AFTER,
    BEFORE,
    commit_points,
    failures_past,
    is_write,
    require_committed_transactions,
    statement,
)
from idempotency.shared.testing.messages import (
    MESSAGE_ID_HEADER,
    Message,
    call_with_task_kwargs,
    new_message,
    sent_straight,
    tasks_sent,
)
from idempotency.shared.testing.steps import (
    die_then_judge,
    fail_then_retry,
    growth,
    kill_after_each_step,
    step_kills,
)

from ..conf import inbox_settings
from ..models import InboxMessage

REDELIVERED_MESSAGE = "a redelivered message is applied once"
CRASH_BEFORE_ACK = (
    "a consumer that dies after its commit and before the ack applies the message once"
)
COMPENSATION = (
    "a steps consumer's unit that gives up undoes each completed step's effect "
    "exactly once, last step first, also when its compensation dies midway "
    "and is resumed"
)
CRASH_AFTER_STEP = (
    "a steps consumer killed right after any of its steps runs each step's "
    "effect once in the end: its redelivery resumes, repeating nothing"
)
FAILED_DELIVERY = (
    "a consumer whose work fails raises, so the message is redelivered and "
    "applied once in the end: a failure swallowed acks the message and loses it"
)
CRASH_ANYWHERE = (
    "a consumer that dies at any point applies the message exactly once in the "
    "end: no effect doubled, none lost"
)

# Why a clean delivery with nothing to die at cannot be checked.
_NO_COMMIT = (
    "the consumer made nothing durable in the database, so there is no "
    "commit to die at; does it write through another connection?"
)
_NO_STEP = (
    "the consumer ran no step: is it a steps consumer whose outside "
    "calls go through delivery.step()?"
)


@dataclass
class Consumer:
    """A consumer as the checks drive it.

    ``consume`` is the task or function. ``payload`` is the event's payload,
    or a function returning one (called for each new message). ``effects()``
    returns a number that grows with the consumer's business effect, or a dict
    of numbers, one per outside effect.
    ``deliver(consume, message)`` hands a message over; by default with the
    relay's keyword arguments.
    """

    consume: Callable
    event_type: str
    payload: Any
    effects: Callable[[], Any]
    aggregate_type: str = ""
    deliver: Callable[[Callable, Message], Any] = call_with_task_kwargs
    # The steps whose effect stays on purpose when the unit gives up (a mail
    # sent); every other step moving effects() needs an undo.
    kept_steps: Collection[str] = ()

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
    seen = _last_inbox_row()
    before = g.measure(consumer.effects)
    consumer.hand(message)
    applied = g.measure(consumer.effects)
    _require_an_effect(consumer, before, applied)
    first = _last_inbox_row()
    with _writes_after_the_claim() as redelivery:
        try:
            consumer.hand(message)
        except Exception as exc:
            raise g.broken(
                REDELIVERED_MESSAGE,
                consumer.describe(message) + ", delivered twice",
                f"the redelivery raised {type(exc).__name__} ({exc}): a message "
                "whose consumer raises is retried until it is dead, though it "
                "was applied; return from the block when delivery.duplicate is "
                "true",
            ) from exc
    after = g.measure(consumer.effects)
    if after != applied:
        raise g.broken(
            REDELIVERED_MESSAGE,
            consumer.describe(message) + ", delivered twice",
            g.change(before, after, applied),
            *_received_as_new(message, seen, first),
            *_applied_as_duplicate(redelivery, seen, first),
        )


@dataclass
class _Redelivery:
    claimed: bool = False
    written_after: str | None = None


@contextmanager
def _writes_after_the_claim() -> Iterator[_Redelivery]:
    """Note whether a write to another table than the inbox's follows the
    inbox's claim (the consumer's work, run after ``receive()`` said
    duplicate)."""
    inbox = f'"{InboxMessage._meta.db_table}"'
    # A steps unit's own records are the library's, not the consumer's work.
    units = [f'"{model._meta.db_table}"' for model in (UnitRecord, StepRecord)]
    redelivery = _Redelivery()

    def wrapper(execute, sql, params, many, context):
        if inbox in sql:
            redelivery.claimed = True
        elif (
            redelivery.claimed
            and not redelivery.written_after
            and is_write(sql)
            and not any(table in sql for table in units)
        ):
            redelivery.written_after = statement(sql)
        return execute(sql, params, many, context)

    with ExitStack() as stack:
        for connection in connections.all():
            stack.enter_context(connection.execute_wrapper(wrapper))
        yield redelivery


def _applied_as_duplicate(redelivery: _Redelivery, seen: int, first: int) -> list[str]:
    """Why a redelivery the inbox knew for a duplicate was applied: the
    consumer wrote after its claim without asking ``delivery.duplicate``."""
    if redelivery.written_after is None:
        return []
    rows = _inbox_rows().filter(pk__gt=seen)
    if rows.filter(pk__gt=first).exists():
        return []  # new to the inbox: _received_as_new() says why
    dropped = list(
        rows.filter(duplicates__gt=0).values_list("subscriber", "message_id")
    )
    if not dropped:
        return []
    return [
        f"the inbox took the redelivery for a duplicate ({_receive_calls(dropped)}"
        f" said delivery.duplicate), and the consumer wrote after it "
        f"({redelivery.written_after}): return from the block when "
        "delivery.duplicate is true"
    ]


def _inbox_rows():
    return InboxMessage.objects.db_manager(router.db_for_read(InboxMessage))


def _last_inbox_row() -> int:
    return _inbox_rows().aggregate(last=Max("pk"))["last"] or 0


def _received_as_new(message: Message, seen: int, first: int) -> list[str]:
    """Why the inbox let a redelivery through, when its rows tell: the
    redelivery stored rows of its own, so ``receive()`` was given another
    name or id than the first time (one made per call: a ``uuid4()``, a
    time), not the same name and the message's id."""
    rows = _inbox_rows().filter(pk__gt=seen).order_by("pk")
    once = list(rows.filter(pk__lte=first).values_list("subscriber", "message_id"))
    again = list(rows.filter(pk__gt=first).values_list("subscriber", "message_id"))
    if not again:
        return []
    calls = f"{_receive_calls(once)} then {_receive_calls(again)}"
    if any(mid == str(message.id) for _, mid in once + again):
        advice = (
            ": give receive() the same name on every delivery, never one made per call"
        )
    else:
        advice = (
            f", never the message's id {message.id}: pass it the id the broker "
            f"redelivers with the message (the {MESSAGE_ID_HEADER} header), "
            "the same on every delivery"
        )
    return [
        f"the inbox took the 2 deliveries for {len(once) + len(again)} "
        f"messages: {calls}{advice}"
    ]


def _receive_calls(rows) -> str:
    return " and ".join(f"receive({name!r}, {mid!r})" for name, mid in rows) or (
        "no receive()"
    )


def check_crash_before_ack(consumer: Consumer) -> None:
    """The consumer commits, the process dies before the ack, the broker
    redelivers the same message: one effect (failure case 4)."""
    __tracebackhide__ = True
    points, delta = _probe(consumer, "crash before ack", CRASH_BEFORE_ACK)
    last = len(points.points)
    problems = _crash_and_redeliver(consumer, last, AFTER, delta)
    if problems:
        raise g.broken(
            CRASH_BEFORE_ACK,
            f"the consumer's durable points: {points.describe()}",
            *problems,
        )


def check_crash_anywhere(consumer: Consumer) -> None:
    """The process dies just before and just after each durable point of the
    consumer; after the redelivery the effect must be there exactly once."""
    __tracebackhide__ = True
    points, delta = _probe(consumer, "crash anywhere", CRASH_ANYWHERE)
    count = len(points.points)
    problems = [
        problem
        for number in range(1, count + 1)
        for when in (BEFORE, AFTER)
        for problem in _crash_and_redeliver(consumer, number, when, delta)
    ]
    if problems:
        raise g.broken(
            CRASH_ANYWHERE,
            f"the consumer's durable points: {points.describe()}",
            *problems,
        )


def check_failed_delivery(consumer: Consumer) -> None:
    """The consumer's work fails after its first write (inside the ORM, then
    as its first model save completes, where its own ``except`` gets it). It
    must raise, so the broker redelivers (the task is not acked), and the
    redelivery must apply the message once. A consumer that returns instead
    has its message acked: whatever the failure undid is lost."""
    __tracebackhide__ = True
    case = "failed delivery"
    require_committed_transactions(case)
    message = consumer.message()
    before = g.measure(consumer.effects)
    consumer.hand(message)
    applied = g.measure(consumer.effects)
    _require_an_effect(consumer, before, applied)
    delta = growth(before, applied)

    def start():
        message = consumer.message()

        def run():
            try:
                consumer.hand(message)
            except Exception as exc:  # the failure made to happen, or its own
                return exc
            return None

        def redeliver():
            with controlled_clock() as clock:
                if runs_steps(consumer.consume):
                    clock.advance(_steps_lease())  # its lease lapses first
                consumer.hand(message)

        return consumer.describe(message), run, redeliver

    problems = fail_then_retry(
        start,
        _FAILURES,
        effects=consumer.effects,
        delta=delta,
        # A task that returns is acked: no redelivery will come.
        returned="the consumer returned instead of raising, so the message "
        "is acked and never redelivered",
        retried="then the message was redelivered",
    )
    if problems is None:
        # Its outside calls are steps, or its effect is not in the database.
        pytest.skip("the consumer wrote nothing of its own for the kit to fail after")
    if problems:
        raise g.broken(FAILED_DELIVERY, *problems)


# Past the library's own rows: the kit fails the work, not them.
_FAILURES = failures_past((InboxMessage, UnitRecord, StepRecord))


def runs_steps(consume) -> bool:
    """Whether ``consume`` is a steps consumer (``@consumer(..., steps=True)``
    or ``@consumer_task(..., steps=True)``)."""
    return bool(getattr(getattr(consume, "run", consume), "steps", False))


def check_crash_after_each_step(consumer: Consumer) -> None:
    """A steps consumer dies right after each of its steps' recovery points
    in turn; once its lease lapses the broker redelivers the message: each
    effect must have happened once (``effects()`` may return a dict of
    counts, one per outside effect, to have each judged on its own)."""
    __tracebackhide__ = True
    case = "crash after each step"
    probe, delta = _watch(
        consumer, case, CRASH_AFTER_STEP, step_kills(), attrgetter("steps"), _NO_STEP
    )

    def start():
        message = consumer.message()
        return lambda: consumer.hand(message)

    problems = kill_after_each_step(
        probe.steps, start, consumer.effects, delta, _steps_lease()
    )
    if problems:
        raise g.broken(
            CRASH_AFTER_STEP, f"the consumer's steps: {probe.describe()}", *problems
        )


def check_abandon_undoes_each_step(consumer: Consumer) -> None:
    """The endpoint kit's compensation case on a steps consumer, a new
    message for each unit (``idempotency.shared.testing.compensations``):
    ``effects()`` counts what stands (``bookings - cancellations``)."""
    __tracebackhide__ = True
    case = "abandon after the steps"
    require_committed_transactions(case)

    def start():
        message = consumer.message()
        return lambda: consumer.hand(message)

    subject = "the consumer's steps: {steps}"
    if not abandon_after_steps(case, start, consumer, COMPENSATION, subject):
        raise g.CannotCheck(case, _NO_STEP)


def _steps_lease() -> timedelta:
    return inbox_settings.STEPS_LEASE + timedelta(seconds=1)


# Every case of a consumer, for ``pytest.mark.parametrize("check", ...)``.
CONSUMER_CHECKS = (
    check_redelivery,
    check_crash_before_ack,
    check_crash_anywhere,
    check_failed_delivery,
)


def _probe(consumer: Consumer, case: str, guarantee: str):
    """Deliver one message cleanly; return its durable points and its effect."""
    watch = commit_points()
    return _watch(consumer, case, guarantee, watch, attrgetter("points"), _NO_COMMIT)


def _watch(consumer: Consumer, case: str, guarantee: str, watch, seen, refusal: str):
    """Deliver one message cleanly under ``watch`` (a context manager that
    records the run); return its record and how much the effects grew.

    A run that left ``seen(record)`` empty gave the case nothing to die at:
    it would pass having proved nothing, so it is refused with ``refusal``.
    A task the consumer sent to the broker itself breaks ``guarantee``."""
    require_committed_transactions(case)
    message = consumer.message()
    before = g.measure(consumer.effects)
    # A retry of the consumer's own task is a redelivery, not an effect.
    with tasks_sent(ignore={_name(consumer.consume)}) as sent, watch as record:
        consumer.hand(message)
    after = g.measure(consumer.effects)
    if sent:
        # Its effect outside the database, which no count of rows shows: a
        # send cannot commit with the inbox row, so a death before that
        # commit has the redelivery send it again (and one sent on commit
        # is lost to a death right after it).
        raise sent_straight(
            guarantee, consumer.describe(message), sent, "the inbox row"
        )
    _require_an_effect(consumer, before, after)
    if not seen(record):
        raise g.CannotCheck(case, refusal)
    return record, growth(before, after)


def _crash_and_redeliver(consumer, number, when, delta) -> list[str]:
    """Die at one point, redeliver; describe what went wrong, effect by effect
    when ``effects()`` counts several."""
    message = consumer.message()
    before = g.measure(consumer.effects)
    lease = _steps_lease() if runs_steps(consumer.consume) else None
    return die_then_judge(
        lambda: consumer.hand(message),
        number,
        when,
        lease,
        effects=consumer.effects,
        before=before,
        delta=delta,
        told="died {crashed}, then redelivered",
    )


def _require_an_effect(consumer, before, after):
    g.require_an_effect(
        "consumer",
        before,
        after,
        when=f"when {_name(consumer.consume)} consumed a message",
        advice="it must count the consumer's business effect.",
    )


def _name(consume) -> str:
    """A Celery task's name, or a function's."""
    return str(
        getattr(consume, "name", None) or getattr(consume, "__qualname__", consume)
    )


__all__ = [
    "COMPENSATION",
    "CONSUMER_CHECKS",
    "CRASH_AFTER_STEP",
    "CRASH_ANYWHERE",
    "CRASH_BEFORE_ACK",
    "FAILED_DELIVERY",
    "MESSAGE_ID_HEADER",
    "REDELIVERED_MESSAGE",
    "Consumer",
    "Message",
    "call_with_task_kwargs",
    "check_abandon_undoes_each_step",
    "check_crash_after_each_step",
    "check_crash_anywhere",
    "check_crash_before_ack",
    "check_failed_delivery",
    "check_redelivery",
    "new_message",
    "runs_steps",
]
