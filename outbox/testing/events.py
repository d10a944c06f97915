"""The outbox's guarantees, against the user's producers and consumers.

* ``capture_events()``: the events a block records and commits, and what it
  sent straight to a broker instead;
* ``check_published_twice()``: each captured event published twice to its
  consumer has one effect (failure case 6);
* ``check_state_and_event_commit_together()``: a unit of work that dies at
  any durable point leaves its state change and its event both, or neither.

Either one reports an event sent straight to the broker, past the outbox.
"""

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from unittest import mock

from django.conf import settings
from django.db import router, transaction
from django.db.models.signals import post_save
from django.test import override_settings
from kombu.messaging import Producer

from idempotency.shared.testing import guarantees as g
from idempotency.shared.testing.crashes import (
    AFTER,
    BEFORE,
    SimulatedCrash,
    commit_points,
    require_committed_transactions,
)
from idempotency.shared.testing.messages import (
    LIBRARY_TASKS,
    Message,
    call_with_task_kwargs,
    flagged,
)
from idempotency.shared.testing.steps import growth

from .. import relay
from ..conf import DEBEZIUM, outbox_settings
from ..models import OutboxMessage
from ..publishers import envelope

PUBLISHED_TWICE = "an event the relay publishes twice reaches its consumer once"
THROUGH_THE_OUTBOX = "events go through the outbox"
STATE_AND_EVENT = (
    "a state change and its event commit together: a unit of work that dies at "
    "any point leaves both or neither"
)
STATE_AND_EVENT_CASE = "state and event commit together"

_PUBLISH = inspect.signature(Producer.publish)
# Set while the outbox relay publishes a batch, in the thread doing it.
_relaying: ContextVar[bool] = ContextVar("once_relaying", default=False)


@dataclass(frozen=True)
class BrokerSend:
    """A message handed to a broker without the outbox: a Celery task sent
    with ``delay()``/``apply_async()``, or a kombu ``Producer.publish()``."""

    task: str | None
    exchange: str
    routing_key: str
    body: Any

    def describe(self) -> str:
        if self.task:
            return f"task {self.task} sent straight to the broker: {g.shown(self.body)}"
        return (
            f"a message published straight to exchange {self.exchange!r} with "
            f"routing key {self.routing_key!r}: {g.shown(self.body)}"
        )


class CapturedEvents(list):
    """The ``Message``s of the events recorded and committed in a block; in
    ``bypassed``, the ``BrokerSend``s that went past the outbox; in
    ``rolled_back``, the events recorded in the block whose transaction
    rolled back (never sent)."""

    def __init__(self):
        super().__init__()
        self.bypassed: list[BrokerSend] = []
        self.rolled_back: list[Message] = []


@contextmanager
def capture_events() -> Iterator[CapturedEvents]:
    """Collect, as ``Message``s, the events ``outbox.api.record()`` writes in
    the block and that commit; rolled-back ones are left out. Messages sent
    to a broker in the block without the outbox (a task's ``delay()``, a
    kombu publish) are kept in the list's ``bypassed``.

    Needs committed transactions (``django_db(transaction=True)``): inside a
    test transaction nothing commits, so nothing is captured.
    """
    captured = CapturedEvents()
    recorded_in_block: list[tuple[str, Message]] = []

    def recorded(sender, instance, created, using, **kwargs):
        if not created:
            return
        payload, headers = envelope(instance)
        message = Message(
            id=str(instance.id),
            event_type=instance.type,
            payload=payload,
            aggregate_type=instance.aggregatetype,
            aggregate_id=instance.aggregateid,
            headers=headers,
        )
        recorded_in_block.append((using, message))
        # Kept once its transaction commits, as the relay would only see it then.
        transaction.on_commit(lambda: captured.append(message), using=using)

    post_save.connect(recorded, sender=OutboxMessage, weak=False)
    try:
        with watching_the_broker() as bypassed:
            captured.bypassed = bypassed
            yield captured
    finally:
        post_save.disconnect(recorded, sender=OutboxMessage)
        # Not committed once the block is out of every transaction: rolled
        # back. (In a test transaction they still wait for a commit.)
        committed = {message.id for message in captured}
        captured.rolled_back = [
            message
            for using, message in recorded_in_block
            if message.id not in committed
            and not transaction.get_connection(using).in_atomic_block
        ]


@contextmanager
def watching_the_broker() -> Iterator[list[BrokerSend]]:
    """Collect what the block hands to a broker through kombu (Celery sends
    through it too), except the outbox relay's own deliveries (sent while it
    publishes a batch) and the library's drains. The messages still go out."""
    sent: list[BrokerSend] = []
    publish = Producer.publish
    publish_batch = relay.publish_batch

    def watched(producer, *args, **kwargs):
        if not _relaying.get():
            call = _PUBLISH.bind(producer, *args, **kwargs)
            send = _straight_send(call.arguments)
            if send is not None:
                sent.append(send)
        return publish(producer, *args, **kwargs)

    # Producer.publish is where every kombu and Celery send goes through;
    # wrapped for the block only, and it still publishes.
    with (
        mock.patch.object(Producer, "publish", watched),
        # The relay's sends are known by where they are sent from, not by
        # their message id header, which any send can carry.
        mock.patch.object(relay, "publish_batch", flagged(_relaying, publish_batch)),
    ):
        yield sent


def _straight_send(arguments: dict) -> BrokerSend | None:
    headers = arguments.get("headers") or {}
    task = headers.get("task")
    if task in LIBRARY_TASKS:
        return None
    body = arguments.get("body")
    if task and isinstance(body, tuple | list) and len(body) >= 2:
        # Celery's message protocol 2: (args, kwargs, embed).
        body = body[1] or body[0]
    exchange = arguments.get("exchange") or ""
    return BrokerSend(
        task=task,
        exchange=getattr(exchange, "name", exchange),
        routing_key=arguments.get("routing_key") or "",
        body=body,
    )


def check_published_twice(
    events: list[Message],
    consumers: Callable | Mapping[str, Callable],
    effects: Callable[[], Any],
    *,
    deliver: Callable[[Callable, Message], Any] = call_with_task_kwargs,
) -> None:
    """Publish each captured event twice, as a relay that died between publish
    and mark does; its consumer's effect must happen once.

    ``consumers`` is the consumer of every event, or a mapping of event type
    to consumer (events of other types are left out). A task of ``consumers``
    sent straight to the broker in ``capture_events()`` breaks the guarantee
    that events go through the outbox; so does any send there when no
    captured event has a consumer.
    """
    __tracebackhide__ = True
    routed = [
        (event, consumer)
        for event in events
        if (consumer := _consumer_of(event, consumers)) is not None
    ]
    bypassed = getattr(events, "bypassed", [])
    names = {getattr(c, "name", None) for c in _all_consumers(consumers)}
    straight = [send for send in bypassed if send.task and send.task in names]
    if straight or (bypassed and not routed):
        raise _bypass(straight or bypassed, events)
    if not routed:
        rolled_back = [e.event_type for e in getattr(events, "rolled_back", [])]
        raise g.CannotCheck(
            "published twice",
            f"no captured event has a consumer (captured: "
            f"{[e.event_type for e in events] or 'none'}); record() events "
            "inside capture_events() on committed transactions"
            + (
                f"; recorded in the block and rolled back with their "
                f"transaction, so never sent: {rolled_back}"
                if rolled_back
                else ""
            ),
        )
    problems = g.Problems(PUBLISHED_TWICE)
    for event, consumer in routed:
        before = g.measure(effects)
        deliver(consumer, event)
        once = g.measure(effects)
        if once == before:
            raise g.CannotCheck(
                "published twice",
                f"effects() stayed {before} when the {event.event_type} event "
                f"{event.id} was consumed; it must count the consumer's effect",
            )
        deliver(consumer, event)  # the relay publishes it again, same id
        twice = g.measure(effects)
        if twice != once:
            problems.append(
                f"{event.event_type} {event.id}: {g.change(before, twice, once)}"
            )
    problems.raise_if_any()


def check_state_and_event_commit_together(
    act: Callable[[], Any],
    effects: Callable[[], Any],
    *,
    event_types: Iterable[str] | None = None,
) -> None:
    """Run ``act()``, a unit of work that changes state and records its
    event (a request to a view, a consumer, a service function), once
    cleanly, then once per durable point with the process dying just before
    and just after it: each run must leave the state change (``effects()``
    moved) and its event (a committed ``record()``) both, or neither.

    ``act()`` must be a new intent each call (a fresh idempotency key, a new
    message id). ``event_types`` limits the events that count. Anything
    ``act()`` sends straight to a broker breaks the guarantee that events go
    through the outbox, beside a recorded event too.
    """
    __tracebackhide__ = True
    require_committed_transactions(STATE_AND_EVENT_CASE)
    kinds = None if event_types is None else frozenset(event_types)
    with _events_kept_in_the_table():
        with capture_events() as captured:
            points, state, events = _run(act, effects, kinds)
        _require_state_and_event(state, events, captured, kinds)
        if not points.points:
            raise g.CannotCheck(
                STATE_AND_EVENT_CASE,
                "act() made nothing durable in the database, so there is no "
                "commit to die at; does it write through another connection?",
            )
        _, again, _ = _run(act, effects, kinds)
        if not again:
            raise g.CannotCheck(
                STATE_AND_EVENT_CASE,
                "act() changed nothing when called a second time; each call must "
                "make a new intent (a fresh key, a new message id)",
            )
        outcomes = [
            _die_once(act, effects, kinds, number, when)
            for number in range(1, len(points.points) + 1)
            for when in (BEFORE, AFTER)
        ]
    # None: that run took a shorter path and never reached the point.
    if all(outcome is None for outcome in outcomes):
        raise g.CannotCheck(
            STATE_AND_EVENT_CASE,
            f"act() never reached its durable points again ({points.describe()}); "
            "does each call make a new intent (a fresh key, a new message id)?",
        )
    problems = [outcome for outcome in outcomes if outcome]
    if problems:
        raise g.broken(
            STATE_AND_EVENT,
            f"act()'s durable points: {points.describe()}",
            *problems,
            "record() the event inside the transaction.atomic() block that makes "
            "the change, never in on_commit() or with require_transaction=False",
        )


def _run(act, effects, kinds, crash_at=None, when=AFTER):
    """Run ``act()`` counting its durable points (dying at ``crash_at``);
    return them, how much the state changed, and the ids of the events it
    recorded that committed (they are in the table)."""
    recorded: list = []

    def saved(sender, instance, created, **kwargs):
        if created and (kinds is None or instance.type in kinds):
            recorded.append(instance.pk)

    before = g.measure(effects)
    post_save.connect(saved, sender=OutboxMessage, weak=False)
    try:
        with commit_points(crash_at, when) as points, suppress(SimulatedCrash):
            act()
    finally:
        post_save.disconnect(saved, sender=OutboxMessage)
    table = OutboxMessage.objects.db_manager(router.db_for_write(OutboxMessage))
    committed = table.filter(pk__in=recorded).values_list("pk", flat=True)
    return points, _moved(before, g.measure(effects)), [str(pk) for pk in committed]


def _moved(before, after):
    """How much the state moved: a number, or by name the effects that moved
    when ``effects()`` counts several (empty, so false, when none did)."""
    moved = growth(before, after)
    if isinstance(moved, dict):
        return {name: value for name, value in moved.items() if value}
    return moved


def _die_once(act, effects, kinds, number, when) -> str | None:
    """Die at one durable point; None when the run never reached it, "" when
    it left both or neither, else what it left."""
    points, state, events = _run(act, effects, kinds, number, when)
    if points.crashed is None:
        return None
    if bool(state) == bool(events):
        return ""
    if state:
        left = f"the state changed (effects moved by {state}) and no event committed"
    else:
        left = f"events {', '.join(events)} committed and the state did not change"
    return f"died {points.crashed}: {left}"


def _require_state_and_event(state, events, captured, kinds):
    __tracebackhide__ = True
    if captured.bypassed:
        # Beside a recorded event too: a send cannot commit with the change
        # (made before the commit, it outlives a rollback; on commit, a death
        # before it loses it).
        raise _bypass(captured.bypassed, captured)
    if not events:
        wanted = "" if kinds is None else f" of type {', '.join(sorted(kinds))}"
        raise g.CannotCheck(
            STATE_AND_EVENT_CASE,
            f"act() committed no outbox event{wanted} (captured: "
            f"{[e.event_type for e in captured] or 'none'}); it must record() "
            "the event its change makes",
        )
    if not state:
        raise g.CannotCheck(
            STATE_AND_EVENT_CASE,
            "effects() did not move when act() ran and recorded its event; it "
            "must count the state change the event describes",
        )


@contextmanager
def _events_kept_in_the_table():
    """In Debezium mode record() deletes its row in the same transaction; the
    check reads committed events from the table, so it keeps them there. The
    delete changes no commit: what commits together is the same."""
    if outbox_settings.RELAY != DEBEZIUM:
        yield
        return
    configured = getattr(settings, "OUTBOX", {})
    with override_settings(OUTBOX={**configured, "RELAY": "celery"}):
        yield


def _bypass(sends: list[BrokerSend], events) -> g.GuaranteeBroken:
    return g.broken(
        THROUGH_THE_OUTBOX,
        *(send.describe() for send in sends),
        f"outbox events recorded: {[e.event_type for e in events] or 'none'}",
        "record() the event with outbox.api.record() in the transaction of its "
        "change; the relay publishes it once that commits",
    )


def _consumer_of(event: Message, consumers):
    if isinstance(consumers, Mapping):
        return consumers.get(event.event_type)
    return consumers


def _all_consumers(consumers) -> list:
    if isinstance(consumers, Mapping):
        return list(consumers.values())
    return [consumers]


__all__ = [
    "PUBLISHED_TWICE",
    "STATE_AND_EVENT",
    "THROUGH_THE_OUTBOX",
    "BrokerSend",
    "CapturedEvents",
    "Message",
    "capture_events",
    "check_published_twice",
    "check_state_and_event_commit_together",
    "watching_the_broker",
]
