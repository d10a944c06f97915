"""What the outbox decided, as signals. Each is sent after the commit of the
fact it reports, with ``aggregate_type``, ``event_type`` and ``message_id``
(per event) or ``count`` (per batch). The sender is ``OutboxMessage``."""

import logging

from django.dispatch import Signal

from idempotency.shared.signals import report

# record() wrote an event (sent when its transaction commits).
event_recorded = Signal()
# The relay published a batch: count, lags (seconds from each event's
# recording, oldest first), seconds (the batch's publish and write-back, or
# None when not timed).
events_published = Signal()
# A publish attempt failed and the event stays pending: error, attempts.
publish_failed = Signal()
# An event ran out of attempts and is dead: error, attempts.
event_dead = Signal()
# An operator requeued dead events: count, user.
events_requeued = Signal()


# Sending them, with one log line per decision on the "outbox" logger.

logger = logging.getLogger("outbox")


def _sender():
    # Imported here: a receiver's module may import this one before the
    # models are ready.
    from .models import OutboxMessage

    return OutboxMessage


def identity(message) -> dict:
    return {
        "aggregate_type": message.aggregatetype,
        "event_type": message.type,
        "message_id": str(message.id),
    }


def recorded(message, *, using: str) -> None:
    report(
        event_recorded,
        _sender(),
        logger=logger,
        level=logging.DEBUG,
        message="Recorded %(event_type)s %(message_id)s",
        using=using,
        **identity(message),
    )


def published(messages, now, *, seconds: float | None, using: str) -> None:
    """``messages`` went out, oldest first; ``lags``: seconds from each one's
    recording to ``now``, the moment its publish was written back;
    ``seconds``: how long their batch took to publish and write back."""
    report(
        events_published,
        _sender(),
        logger=logger,
        level=logging.DEBUG,
        message="Published %(count)s event(s)",
        using=using,
        count=len(messages),
        lags=[(now - message.created_at).total_seconds() for message in messages],
        seconds=seconds,
    )


def failed(message, error: str, *, dead: bool, using: str) -> None:
    """A publish attempt failed: the message backs off, or is dead."""
    report(
        event_dead if dead else publish_failed,
        _sender(),
        logger=logger,
        level=logging.ERROR if dead else logging.WARNING,
        message=(
            "Publishing %(message_id)s failed %(attempts)s time(s); it is dead: "
            "%(error)s"
            if dead
            else "Publishing %(message_id)s failed; retried later: %(error)s"
        ),
        using=using,
        error=error,
        attempts=message.attempts - message.requeued_at_attempt,
        **identity(message),
    )


def requeued(messages, user, *, using: str) -> None:
    report(
        events_requeued,
        _sender(),
        logger=logger,
        level=logging.INFO,
        message="%(user)s requeued %(count)s event(s)",
        using=using,
        count=len(messages),
        user=user,
        message_ids=[str(message.id) for message in messages],
    )
