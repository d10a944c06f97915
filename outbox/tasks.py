"""Celery task of the relay; the work is ``relay.drain()``."""

from celery import shared_task

from . import relay as _relay


@shared_task(name="outbox.relay", ignore_result=True)
def relay(using: str | None = None) -> dict:
    """Drain the outbox until it is empty or the time budget is spent: the
    router's database, or the alias ``using``."""
    return vars(_relay.drain(using=using))
