"""What the webhook intake and its processing decided, as signals: ``source``
with each, and ``delivery_id``/``event_type`` once a delivery is verified.
The sender is ``WebhookReceipt``."""

import logging

from django.dispatch import Signal

from idempotency.shared.signals import report

from .exceptions import SourceOutOfService, VerificationFailed

# A verified delivery was stored for processing.
delivery_accepted = Signal()
# A delivery was refused: reason (the problem type's short name), status.
delivery_rejected = Signal()
# A resent delivery was answered from its receipt.
delivery_duplicate = Signal()
# A receipt's handlers ran and committed.
delivery_processed = Signal()
# A receipt's handlers raised: error, attempts.
delivery_failed = Signal()
# An operator replayed receipts from the console: count, user.
delivery_replayed = Signal()


# Sending them, with one log line per decision on the "webhooks" logger.

logger = logging.getLogger("webhooks")


def _sender():
    # Imported here: a receiver's module may import this one before the
    # models are ready.
    from .models import WebhookReceipt

    return WebhookReceipt


def _identity(source: str, delivery) -> dict:
    return {
        "source": source,
        "delivery_id": delivery.delivery_id,
        "event_type": delivery.event_type,
    }


def rejected(source: str, refusal) -> None:
    """``source``: a configured source's name, or "" (the URL named none)."""
    reason = refusal.type.removeprefix("webhook-")
    if isinstance(refusal, SourceOutOfService):
        # Its settings' problems were logged (ERROR) where they were found.
        level = None
    elif isinstance(refusal, VerificationFailed):
        level = logging.WARNING  # a forgery, a wrong secret or a skewed clock
    else:
        level = logging.INFO
    report(
        delivery_rejected,
        _sender(),
        logger=logger,
        level=level,
        message="Refused a delivery to %(source)r (%(reason)s): %(detail)s",
        source=source,
        reason=reason,
        status=refusal.status,
        detail=refusal.detail,
    )


def accepted(source: str, delivery, *, reopened: bool, using: str) -> None:
    """``reopened``: a redelivery of a failed receipt, to be processed again."""
    report(
        delivery_accepted,
        _sender(),
        logger=logger,
        level=logging.DEBUG,
        message="Accepted %(delivery_id)s from %(source)s",
        using=using,
        reopened=reopened,
        **_identity(source, delivery),
    )


def duplicate(source: str, delivery, existing) -> None:
    """Answered from ``existing``, the receipt stored earlier; its delivery
    id differs when a signed body came back under a new (unsigned) id."""
    resent = existing.delivery_id != delivery.delivery_id
    report(
        delivery_duplicate,
        _sender(),
        logger=logger,
        level=logging.WARNING if resent else logging.INFO,
        message=(
            "Body of %(original)s resent to %(source)s as %(delivery_id)s"
            if resent
            else "Duplicate %(delivery_id)s from %(source)s"
        ),
        original=existing.delivery_id,
        state=existing.state,
        **_identity(source, delivery),
    )


def processed(receipt, *, using: str) -> None:
    """Its handlers ran (``state`` processed), or it had none (skipped)."""
    report(
        delivery_processed,
        _sender(),
        logger=logger,
        level=logging.DEBUG,
        message="Receipt %(receipt_id)s %(state)s",
        using=using,
        receipt_id=receipt.pk,
        state=receipt.state,
        **_identity(receipt.source, receipt),
    )


def failed(receipt_id: int, error: Exception, identity: dict, *, using: str) -> None:
    """``identity``: the receipt's source, delivery_id, event_type and
    attempts as recorded (empty if it is gone)."""
    report(
        delivery_failed,
        _sender(),
        logger=logger,
        level=logging.WARNING,
        message="Receipt %(receipt_id)s failed: %(error)r",
        using=using,
        receipt_id=receipt_id,
        error=error,
        **identity,
    )


def replayed(receipts, user, *, forced: bool, using: str) -> None:
    """``forced``: processed receipts were run again (force reprocess)."""
    report(
        delivery_replayed,
        _sender(),
        logger=logger,
        level=logging.INFO,
        message="%(user)s replayed %(count)s receipt(s)",
        using=using,
        count=len(receipts),
        user=user,
        forced=forced,
        receipt_ids=[receipt.pk for receipt in receipts],
    )
