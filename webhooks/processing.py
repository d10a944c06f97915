"""Process one receipt at most once: lock, run its handlers, mark it."""

import logging
import traceback
from collections.abc import Callable
from datetime import timedelta
from enum import StrEnum

from django.db import router, transaction

from idempotency.shared import clock

from .handlers import Event, handlers_for
from .models import WebhookReceipt

logger = logging.getLogger("webhooks")
State = WebhookReceipt.State
# The stored traceback is for operators; the tail holds the useful part.
MAX_ERROR_LENGTH = 4000


class Outcome(StrEnum):
    """What ``process()`` found or did."""

    # The receipt is (now, or already) processed: its handlers committed.
    PROCESSED = State.PROCESSED
    # No handler is registered for its event; it is marked skipped.
    SKIPPED = State.SKIPPED
    # Another worker holds it right now; it runs there.
    BUSY = "busy"
    # It is gone (purged).
    MISSING = "missing"


class HandlerFailed(Exception):
    """A handler raised; its work rolled back and the receipt says failed."""


def process(receipt_id: int) -> Outcome:
    """Run the handlers of one receipt unless it is finished; say what happened.

    Raises ``HandlerFailed`` after recording the failure.
    """
    receipts = WebhookReceipt.objects.db_manager(router.db_for_write(WebhookReceipt))
    try:
        # The handlers' writes and the "processed" mark commit as one.
        with transaction.atomic(using=receipts.db):
            # SKIP LOCKED: a second worker on the same receipt leaves at once
            # instead of holding a connection until the first commits (then
            # the state check below would send it away).
            receipt = receipts.lock_for_processing(receipt_id).first()
            if receipt is None:
                gone = not receipts.filter(pk=receipt_id).exists()
                return Outcome.MISSING if gone else Outcome.BUSY
            if receipt.state in WebhookReceipt.FINISHED:
                return Outcome(receipt.state)
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
            return Outcome(receipt.state)
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
