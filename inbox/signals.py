"""What the inbox decided, as signals: ``subscriber`` and ``message_id`` with
each delivery's, sent when the claim commits (with the consumer's work), and
an operator's replay. The sender is ``InboxMessage``."""

import logging

from django.dispatch import Signal

from idempotency.shared.signals import Reporter

# A message was applied for the first time.
message_received = Signal()
# A redelivery of an applied message was dropped.
duplicate_dropped = Signal()
# An operator replayed dead messages from the console: count, user, messages
# (each replayed one's subscriber and message_id).
messages_replayed = Signal()
# A consumer gave its message up (it raised Abandon): its work rolled back,
# and no redelivery runs it again. reason.
message_abandoned = Signal()
# A consumer task's attempts ran out (or its runs kept dying before their
# ack): the message is dead, kept for a replay. attempts, error.
message_dead = Signal()


# Sending them, with one log line per decision on the "inbox" logger.

_report = Reporter("inbox", "inbox.InboxMessage")


def delivered(delivery, *, using: str) -> None:
    """Applied for the first time, or dropped as a redelivery."""
    if delivery.duplicate:
        signal, level = duplicate_dropped, logging.INFO
        message = "Dropped a redelivery of %(message_id)s to %(subscriber)s"
    else:
        signal, level = message_received, logging.DEBUG
        message = "Applying %(message_id)s for %(subscriber)s"
    _report(
        signal,
        level,
        message,
        using=using,
        subscriber=delivery.subscriber,
        message_id=delivery.message_id,
    )


def abandoned(subscriber: str, message_id: str, reason, *, using: str) -> None:
    """Given up by its consumer, once its claim commits."""
    _report(
        message_abandoned,
        logging.WARNING,
        "Gave up %(message_id)s for %(subscriber)s: %(reason)s",
        using=using,
        subscriber=subscriber,
        message_id=message_id,
        reason=reason,
    )


def dead(subscriber: str, message_id: str, *, attempts, error, using) -> None:
    """Once its dead row is written; logged where that was decided (with the
    task's name and id)."""
    _report(
        message_dead,
        None,
        "",
        using=using,
        subscriber=subscriber,
        message_id=message_id,
        attempts=attempts,
        error=error,
    )


def replayed(messages, user) -> None:
    """Sent at once: the replayed tasks went to the broker, which no
    transaction holds back."""
    _report.operator_action(
        messages_replayed,
        user,
        messages,
        "replayed %(count)s dead message(s)",
        messages=[
            {"subscriber": message.subscriber, "message_id": message.message_id}
            for message in messages
        ],
    )
