"""What the inbox decided, as signals: ``subscriber`` and ``message_id`` with
each, sent when the claim commits (with the consumer's work). The sender is
``InboxMessage``."""

import logging

from django.dispatch import Signal

from idempotency.shared.signals import report

# A message was applied for the first time.
message_received = Signal()
# A redelivery of an applied message was dropped.
duplicate_dropped = Signal()


# Sending them, with one log line per decision on the "inbox" logger.

logger = logging.getLogger("inbox")


def _sender():
    # Imported here: a receiver's module may import this one before the
    # models are ready.
    from .models import InboxMessage

    return InboxMessage


def received(delivery, *, using: str) -> None:
    report(
        message_received,
        _sender(),
        logger=logger,
        level=logging.DEBUG,
        message="Applying %(message_id)s for %(subscriber)s",
        using=using,
        subscriber=delivery.subscriber,
        message_id=delivery.message_id,
    )


def dropped(delivery, *, using: str) -> None:
    report(
        duplicate_dropped,
        _sender(),
        logger=logger,
        level=logging.INFO,
        message="Dropped a redelivery of %(message_id)s to %(subscriber)s",
        using=using,
        subscriber=delivery.subscriber,
        message_id=delivery.message_id,
    )
