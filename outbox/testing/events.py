"""The outbox's at-least-once, against the user's consumers: capture the events
a block records, then publish each one twice to its consumer (failure case 6).
"""

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.db import transaction
from django.db.models.signals import post_save

from idempotency.shared.testing import guarantees as g
from idempotency.shared.testing.messages import Message, call_with_task_kwargs

from ..models import OutboxMessage
from ..publishers import envelope

PUBLISHED_TWICE = "an event the relay publishes twice reaches its consumer once"


@contextmanager
def capture_events() -> Iterator[list[Message]]:
    """Collect, as ``Message``s, the events ``outbox.api.record()`` writes in
    the block and that commit; rolled-back ones are left out.

    Needs committed transactions (``django_db(transaction=True)``): inside a
    test transaction nothing commits, so nothing is captured.
    """
    captured: list[Message] = []

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
        # Kept once its transaction commits, as the relay would only see it then.
        transaction.on_commit(lambda: captured.append(message), using=using)

    post_save.connect(recorded, sender=OutboxMessage, weak=False)
    try:
        yield captured
    finally:
        post_save.disconnect(recorded, sender=OutboxMessage)


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
    to consumer (events of other types are left out).
    """
    __tracebackhide__ = True
    routed = [
        (event, consumer)
        for event in events
        if (consumer := _consumer_of(event, consumers)) is not None
    ]
    if not routed:
        raise g.CannotCheck(
            "published twice",
            f"no captured event has a consumer (captured: "
            f"{[e.event_type for e in events] or 'none'}); record() events "
            "inside capture_events() on committed transactions",
        )
    problems = []
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
    if problems:
        raise g.broken(PUBLISHED_TWICE, *problems)


def _consumer_of(event: Message, consumers):
    if isinstance(consumers, Mapping):
        return consumers.get(event.event_type)
    return consumers


__all__ = ["PUBLISHED_TWICE", "Message", "capture_events", "check_published_twice"]
