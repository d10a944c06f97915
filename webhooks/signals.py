"""What the webhook intake and its processing decided, as signals: ``source``
with each, and ``delivery_id``/``event_type`` once a delivery is verified.
The sender is ``WebhookReceipt``."""

import logging

from django.dispatch import Signal

from idempotency.shared.signals import Reporter

from .exceptions import SourceOutOfService, VerificationFailed

# A verified delivery was stored for processing: reopened (a redelivery of
# a failed receipt, to run again).
delivery_accepted = Signal()
# A delivery was refused: reason (the problem type's short name), status,
# detail; source is "" when the URL named no configured source.
delivery_rejected = Signal()
# A resent delivery was answered from its receipt: original (that receipt's
# delivery id), state.
delivery_duplicate = Signal()
# A receipt's handlers ran and committed: receipt_id, state (processed, or
# skipped when it has none).
delivery_processed = Signal()
# A receipt's handlers raised: receipt_id, error (the exception), attempts.
delivery_failed = Signal()
# An operator replayed receipts from the console: count, user, forced
# (processed ones run again), receipt_ids.
delivery_replayed = Signal()


# Sending them, with one log line per decision on the "webhooks" logger.

_report = Reporter("webhooks", "webhooks.WebhookReceipt")


def _identity(source: str, delivery) -> dict:
    return {
        "source": source,
        "delivery_id": delivery.delivery_id,
        "event_type": delivery.event_type,
    }


def rejected(source: str, refusal, delivery=None) -> None:
    """``source``: a configured source's name, or "" (the URL named none).
    ``delivery``: the verified delivery refused after its check, if any."""
    if isinstance(refusal, SourceOutOfService):
        # Its settings' problems were logged (ERROR) where they were found.
        level = None
    elif isinstance(refusal, VerificationFailed):
        level = logging.WARNING  # a forgery, a wrong secret or a skewed clock
    else:
        level = logging.INFO
    _report(
        delivery_rejected,
        level,
        "Refused a delivery to %(source)r (%(reason)s): %(detail)s",
        **(_identity(source, delivery) if delivery is not None else {"source": source}),
        reason=refusal.type.removeprefix("webhook-"),
        status=refusal.status,
        detail=refusal.detail,
    )


def accepted(source: str, delivery, *, reopened: bool, using: str) -> None:
    """``reopened``: a redelivery of a failed receipt, to be processed again."""
    _report(
        delivery_accepted,
        logging.DEBUG,
        "Accepted %(delivery_id)s from %(source)s",
        using=using,
        reopened=reopened,
        **_identity(source, delivery),
    )


def duplicate(source: str, delivery, existing) -> None:
    """Answered from ``existing``, the receipt stored earlier; its delivery
    id differs when a signed body came back under a new (unsigned) id."""
    resent = existing.delivery_id != delivery.delivery_id
    _report(
        delivery_duplicate,
        logging.WARNING if resent else logging.INFO,
        "Body of %(original)s resent to %(source)s as %(delivery_id)s"
        if resent
        else "Duplicate %(delivery_id)s from %(source)s",
        original=existing.delivery_id,
        state=existing.state,
        **_identity(source, delivery),
    )


def processed(receipt, *, using: str) -> None:
    """Its handlers ran (``state`` processed), or it had none (skipped)."""
    _report(
        delivery_processed,
        logging.DEBUG,
        "Receipt %(receipt_id)s %(state)s",
        using=using,
        receipt_id=receipt.pk,
        state=receipt.state,
        **_identity(receipt.source, receipt),
    )


def failed(receipt_id: int, error: Exception, identity: dict, *, using: str) -> None:
    """``identity``: the receipt's source, delivery_id, event_type and
    attempts as recorded (empty if it is gone)."""
    _report(
        delivery_failed,
        logging.WARNING,
        "Receipt %(receipt_id)s failed: %(error)r",
        using=using,
        receipt_id=receipt_id,
        error=error,
        **identity,
    )


def replayed(receipts, user, *, forced: bool, using: str) -> None:
    """``forced``: processed receipts were run again (force reprocess)."""
    _report.operator_action(
        delivery_replayed,
        user,
        receipts,
        "replayed %(count)s receipt(s)",
        using=using,
        forced=forced,
        receipt_ids=[receipt.pk for receipt in receipts],
    )
