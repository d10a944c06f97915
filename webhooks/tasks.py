"""Celery tasks: thin wrappers around webhooks.processing."""

import random
from datetime import timedelta

from celery import shared_task

from . import processing
from .conf import webhooks_settings


# max_retries=None: WEBHOOKS["MAX_RETRIES"] decides, read at run time.
@shared_task(
    name="webhooks.process_receipt", bind=True, acks_late=True, max_retries=None
)
def process_receipt(self, receipt_id: int) -> str:
    try:
        return processing.process(receipt_id)
    except processing.HandlerFailed as exc:
        if self.request.retries >= webhooks_settings.MAX_RETRIES:
            raise
        raise self.retry(exc=exc, countdown=backoff(self.request.retries)) from exc


@shared_task(name="webhooks.enqueue_waiting")
def enqueue_waiting(older_than_seconds: float = 300) -> int:
    """Safety net for beat: re-enqueue receipts whose enqueue was lost."""
    return processing.enqueue_waiting(timedelta(seconds=older_than_seconds), enqueue)


def enqueue(receipt_id: int) -> None:
    """The default WEBHOOKS["ENQUEUE"]: send the receipt to a Celery worker."""
    process_receipt.delay(receipt_id)


def backoff(retries: int) -> float:
    """Exponential backoff, capped, with jitter so failures do not retry in step."""
    ceiling = min(webhooks_settings.RETRY_BACKOFF_MAX, 2 ** (retries + 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)
