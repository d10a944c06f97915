"""Celery tasks of the idempotency app."""

from celery import shared_task

from .shared import retention


@shared_task(name="idempotency.purge", ignore_result=True)
def purge(
    only=None,
    batch_size=retention.DEFAULT_BATCH_SIZE,
    pause=retention.DEFAULT_PAUSE,
    using=None,
):
    """Run the same purge as ``manage.py purge_idempotency``."""
    return retention.purge(only=only, batch_size=batch_size, pause=pause, using=using)
