"""What the outbox decided, as signals. Each is sent after the commit of the
fact it reports, with ``aggregate_type``, ``event_type`` and ``message_id``
(per event) or ``count`` (per batch). The sender is ``OutboxMessage``."""

import logging

from django.dispatch import Signal

from idempotency.shared.signals import Reporter

# record() wrote an event (sent when its transaction commits).
event_recorded = Signal()
# The relay published a batch: count, lags (seconds from each event's
# record() to its publish, oldest first), seconds (the batch's publish and
# write-back, or None when not timed).
events_published = Signal()
# A publish attempt failed and the event backs off: error, attempts.
publish_failed = Signal()
# An event ran out of attempts and is dead: error, attempts.
event_dead = Signal()
# An operator requeued dead or backing-off events: count, user, message_ids.
events_requeued = Signal()


# Sending them, with one log line per decision on the "outbox" logger.

_report = Reporter("outbox", "outbox.OutboxMessage")


def identity(message) -> dict:
    return {
        "aggregate_type": message.aggregatetype,
        "event_type": message.type,
        "message_id": str(message.id),
    }


def recorded(message, *, using: str) -> None:
    _report(
        event_recorded,
        logging.DEBUG,
        "Recorded %(event_type)s %(message_id)s",
        using=using,
        **identity(message),
    )


def published(messages, now, *, seconds: float | None, using: str) -> None:
    """``messages`` went out, oldest first; ``now``: when that was written;
    ``seconds``: how long their batch took to publish and write back."""
    _report(
        events_published,
        logging.DEBUG,
        "Published %(count)s event(s)",
        using=using,
        count=len(messages),
        lags=[(now - message.created_at).total_seconds() for message in messages],
        seconds=seconds,
    )


def failed(message, error: str, *, dead: bool, using: str) -> None:
    """A publish attempt failed: the message backs off, or is dead."""
    _report(
        event_dead if dead else publish_failed,
        logging.ERROR if dead else logging.WARNING,
        "Publishing %(message_id)s failed; "
        + ("it is dead" if dead else "retried later")
        + " (attempt %(attempts)s): %(error)s",
        using=using,
        error=error,
        attempts=message.attempts - message.requeued_at_attempt,
        **identity(message),
    )


def requeued(messages, user, *, using: str) -> None:
    _report.operator_action(
        events_requeued,
        user,
        messages,
        "requeued %(count)s event(s)",
        using=using,
        message_ids=[str(message.id) for message in messages],
    )
