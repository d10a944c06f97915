"""Process one receipt at most once: lock, run its handlers, mark it."""

import logging
import traceback
from collections.abc import Callable
from datetime import timedelta

from django.db import router, transaction

from idempotency.shared import clock

from .handlers import Event, handlers_for
from .models import WebhookReceipt

logger = logging.getLogger("webhooks")
State = WebhookReceipt.State
# The stored traceback is for operators; the tail holds the useful part.
MAX_ERROR_LENGTH = 4000

# What process() reports.
BUSY = "busy"
MISSING = "missing"


class HandlerFailed(Exception):
    """A handler raised; its work rolled back and the receipt says failed."""


def process(receipt_id: int) -> str:
    """Run the handlers of one receipt; return the state it was left in.

    Returns ``busy`` when another worker holds the receipt and ``missing``
    when it is gone. Raises ``HandlerFailed`` after recording the failure.
    """
    receipts = WebhookReceipt.objects.db_manager(router.db_for_write(WebhookReceipt))
    try:
        # The handlers' writes and the "processed" mark commit as one.
        with transaction.atomic(using=receipts.db):
            # SKIP LOCKED: a second worker on the same receipt leaves at once
            # instead of queueing behind the first and running it again.
            receipt = receipts.claimable(receipt_id).first()
            if receipt is None:
                return BUSY if receipts.filter(pk=receipt_id).exists() else MISSING
            if receipt.state in WebhookReceipt.FINISHED:
                return receipt.state
            handlers = handlers_for(receipt.source, receipt.event_type)
            event = Event(
                receipt=receipt,
                source=receipt.source,
                event_type=receipt.event_type,
                delivery_id=receipt.delivery_id,
                occurred_at=receipt.occurred_at,
            )
            for handler in handlers:
                handler(event)
            receipt.state = State.PROCESSED if handlers else State.SKIPPED
            receipt.attempts += 1
            receipt.last_error = ""
            receipt.processed_at = clock.now()
            receipt.save(
                update_fields=["state", "attempts", "last_error", "processed_at"]
            )
            return receipt.state
    except Exception as exc:
        error = traceback.format_exc()[-MAX_ERROR_LENGTH:]
        # A short transaction of its own: the failed one rolled back.
        receipts.record_failure(receipt_id, error)
        logger.warning("webhook receipt %s failed: %r", receipt_id, exc)
        raise HandlerFailed(f"receipt {receipt_id}: {exc!r}") from exc


def enqueue_waiting(older_than: timedelta, enqueue: Callable, limit=1000) -> int:
    """Enqueue received receipts no worker took (a lost enqueue); say how many."""
    waiting = WebhookReceipt.objects.waiting(clock.now() - older_than)
    pks = list(waiting.order_by("received_at").values_list("pk", flat=True)[:limit])
    for pk in pks:
        enqueue(pk)
    return len(pks)
