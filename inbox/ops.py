"""What the inbox contributes to operations: retention and a panel."""

from collections.abc import Iterator

from celery import current_app
from django.db.models import Sum
from django.utils.translation import gettext as _

from idempotency.console.panels import (
    Figure,
    Panel,
    capped_count,
    changelist_url,
    in_state,
)
from idempotency.shared import units
from idempotency.shared.steps.models import UnitRecord

from .conf import checked_retention
from .models import InboxMessage

State = InboxMessage.State


def panel(now) -> Panel:
    redelivered = InboxMessage.objects.with_duplicates()
    # The partial index on duplicates > 0 keeps this to the redelivered rows.
    dropped = redelivered.aggregate(total=Sum("duplicates"))["total"] or 0
    return Panel(
        _("Inbox"),
        [
            Figure(
                _("duplicates dropped"),
                dropped,
                changelist_url(InboxMessage, duplicates="yes"),
            ),
            Figure(
                _("messages redelivered"),
                capped_count(redelivered),
                changelist_url(InboxMessage, duplicates="yes"),
            ),
            in_state(InboxMessage, _("dead messages"), InboxMessage.State.DEAD),
        ],
    )


def purgeable(now, using=None):
    return InboxMessage.objects.purgeable(now, checked_retention())


def kept_units():
    """The units of the rows the purge keeps whatever their age: a dead one
    (a replay, a redelivery applies it) and a running one (its redelivery
    resumes it). Their unit stays as long: purged, a given-up unit would
    let that run do its steps again."""
    identity = units.Identity(units.INBOX, "subscriber", "message_id")
    kept = InboxMessage.objects.filter(state__in=(State.DEAD, State.RUNNING))
    return kept.annotate(unit=identity)


def replay(messages, *, connection=None) -> list[InboxMessage]:
    """Send each dead message's task again; return those sent (see
    ``replay_each``)."""
    return list(replay_each(messages, connection=connection))


def replay_each(messages, *, connection=None) -> Iterator[InboxMessage]:
    """Send each dead message's task again, yielding each once it is sent:
    a caller stopped by the broker knows which went.

    The same task id and arguments, so the same message id: the first run
    that commits takes the dead row over, and a second replay of it is a
    duplicate. A row applied meanwhile, or without a redrive (arguments
    that were not JSON), is skipped; so is a steps consumer's message whose
    unit gave up (its last attempt compensated its steps): its run would
    find every step abandoned and apply nothing. Resend that one from its
    producer, as a new message.
    """
    messages = [
        message
        for message in messages
        if message.state == InboxMessage.State.DEAD and message.redrive
    ]
    # One query for the units of all of them, not one per message.
    given_up = _given_up(messages)
    for message in messages:
        if _unit(message).identity in given_up:
            continue
        redrive = message.redrive
        current_app.send_task(
            redrive["task"],
            redrive["args"],
            redrive["kwargs"],
            task_id=redrive["id"],
            headers=redrive["headers"],
            connection=connection,
            **_route(redrive),
        )
        yield message


def _route(redrive) -> dict:
    """Where a replay goes: the exchange and routing key the message came by,
    so a topic binding ("billing.#") takes it to the queue it took it to;
    else (the default exchange, or a row kept before the exchange was) the
    queue named by its routing key, as the default exchange routes."""
    if redrive.get("exchange"):
        return {"exchange": redrive["exchange"], "routing_key": redrive["queue"]}
    return {"queue": redrive["queue"]}


def _unit(message) -> units.Unit:
    return units.Unit(units.INBOX, (message.subscriber, message.message_id))


def still_compensating(messages) -> list[InboxMessage]:
    """Those of ``messages`` whose unit is still compensating: an undo failed
    when it gave up. Its undos finish when an operator abandons the unit
    again (Units of work), not by a replay of the message."""
    compensating = _units_in(messages, (UnitRecord.State.COMPENSATING,))
    return [message for message in messages if _unit(message).identity in compensating]


def _given_up(messages) -> set[str]:
    """The identities of the messages' units that gave up (compensating or
    compensated)."""
    return _units_in(
        messages, (UnitRecord.State.COMPENSATING, UnitRecord.State.COMPENSATED)
    )


def _units_in(messages, states) -> set[str]:
    if not messages:
        return set()
    # On the messages' database, where their units live (receive_steps()
    # begins them there): read elsewhere, a replica behind it, a unit that
    # gave up would look running and its message would be replayed.
    return set(
        UnitRecord.objects.using(messages[0]._state.db)
        .filter(
            pk__in=[_unit(message).identity for message in messages],
            state__in=states,
        )
        .values_list("pk", flat=True)
    )
