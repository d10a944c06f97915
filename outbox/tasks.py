"""Celery task of the relay; the work is ``relay.drain()``."""

import logging

from celery import shared_task

from . import relay as _relay

logger = logging.getLogger("outbox")


@shared_task(name="outbox.relay", ignore_result=True)
def relay(using: str | None = None) -> dict:
    """Drain the outbox until it is empty or the time budget is spent: the
    router's database, or the alias ``using``."""
    result = _relay.drain(using=using)
    if result.unfinished:
        # More may be due, and no kick may come (the commits that kicked are
        # over): a fresh task goes on, after the worker's other tasks.
        try:
            relay.apply_async(kwargs={"using": using} if using else None, retry=False)
        except Exception:
            logger.warning(
                "Could not send the relay on; beat drains the rest.", exc_info=True
            )
    return vars(result)
