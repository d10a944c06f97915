"""Celery tasks: thin wrappers around webhooks.processing."""

import logging
import random
from datetime import timedelta

from celery import shared_task

from idempotency.shared import workers

from . import processing
from .conf import webhooks_settings

logger = logging.getLogger("webhooks")


# Receipts one drain task processes before it hands over to a fresh one.
DRAIN_LIMIT = 500


# max_retries=None: WEBHOOKS["MAX_RETRIES"] decides, read at run time.
# PersistentTask: a retry is the receipt's only copy once the failed run is
# acked, whatever task_default_delivery_mode says.
@shared_task(
    name="webhooks.process_receipt",
    base=workers.PersistentTask,
    bind=True,
    acks_late=True,
    max_retries=None,
)
def process_receipt(self, receipt_id: int) -> str:
    try:
        # Its retries so far: with its workers' deaths, they use its runs up.
        outcome = processing.process(receipt_id, failures=self.request.retries)
    except processing.HandlerFailed as exc:
        if exc.last_attempt:
            raise
        raise self.retry(exc=exc, countdown=backoff(self.request.retries)) from exc
    if outcome == processing.Outcome.LEASED:
        # Its steps run elsewhere, or ran in a worker that died: look again
        # once the lease has lapsed, at the same attempt (this copy ran
        # nothing).
        lease = webhooks_settings.STEPS_LEASE.total_seconds()
        workers.come_back(
            self, lease, f"another worker holds receipt {receipt_id}'s steps", logger
        )
    return outcome


@shared_task(name="webhooks.drain", acks_late=True)
def drain() -> int:
    """Process the received receipts (the default ENQUEUE kicks this)."""
    ran = processing.drain(DRAIN_LIMIT, retry_later)
    if ran >= DRAIN_LIMIT:
        # More may wait: a fresh task lets the worker's other tasks run first.
        drain.apply_async(retry=False)
    return ran


@shared_task(name="webhooks.enqueue_waiting")
def enqueue_waiting(older_than_seconds: float = 300) -> int:
    """Safety net for beat: enqueue again receipts whose enqueue was lost."""
    return processing.enqueue_waiting(
        timedelta(seconds=older_than_seconds), webhooks_settings.ENQUEUE
    )


def enqueue(receipt_id: int) -> None:
    """An ENQUEUE that sends each receipt to a Celery worker as a task of its
    own (a broker message per receipt; the default kicks a drain instead)."""
    process_receipt.delay(receipt_id)


def retry_later(receipt_id: int) -> None:
    """Retry a receipt that failed in a drain as process_receipt's first retry."""
    if webhooks_settings.MAX_RETRIES < 1:
        return
    try:
        # retries=1: the drain's run was the first attempt, so MAX_RETRIES
        # and the backoff carry on from there (Celery hands it to send_task()).
        process_receipt.apply_async(
            (receipt_id,), countdown=backoff(0), retries=1, retry=False
        )
    except Exception:
        # It stays failed: the provider's redelivery or a replay reopens it.
        logger.warning(
            "Could not schedule a retry of receipt %s",
            receipt_id,
            extra={"receipt_id": receipt_id},
        )


def backoff(retries: int) -> float:
    """Exponential backoff, capped, with jitter so failures do not retry in step."""
    ceiling = min(webhooks_settings.RETRY_BACKOFF_MAX, 2 ** (retries + 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)
