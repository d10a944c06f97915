"""The load bench's WSGI app: the demo's, counting the relay kicks it sends."""

import functools

import redis
from celery.signals import after_task_publish
from django.conf import settings

from project.wsgi import application

__all__ = ["application"]

# A counter in the bench's broker database; bench/load.py reads it per phase.
KICKS = "bench:relay-kicks"


@functools.cache
def _redis():
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


@after_task_publish.connect
def _count_kick(sender=None, **kwargs):
    # The sender is the task's name; beat's safety-net runs are not counted
    # (they are sent by the beat process, which does not load this module).
    if sender == "outbox.relay":
        _redis().incr(KICKS)
