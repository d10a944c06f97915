"""Publishers: how the relay hands a message to the outside world.

A publisher is a context manager (the relay opens it once per drain) with one
required method, ``publish(message)``, which returns only once the broker has
taken the message and raises otherwise. The relay hands over each claimed
batch through ``publish_many(messages)``, which a publisher overrides to send
a batch at once; by default it publishes one message at a time. Pick one with
``OUTBOX["PUBLISHER"]`` (a dotted path) and give it keyword arguments in
``OUTBOX["PUBLISHER_OPTIONS"]``.

One module per publisher, like Django's mail backends: ``base`` (the class to
subclass and the envelope every publisher sends), ``kombu``, ``celery`` and
``memory``. Their classes are importable from here too, so
``"outbox.publishers.KombuPublisher"`` and
``"outbox.publishers.kombu.KombuPublisher"`` name the same class.
"""

from idempotency.shared.headers import EVENT_HEADERS, MESSAGE_ID_HEADER

from .base import BasePublisher, envelope
from .celery import CeleryTaskPublisher
from .kombu import KombuPublisher
from .memory import InMemoryPublisher, SentMessage

__all__ = [
    "EVENT_HEADERS",
    "MESSAGE_ID_HEADER",
    "BasePublisher",
    "CeleryTaskPublisher",
    "InMemoryPublisher",
    "KombuPublisher",
    "SentMessage",
    "envelope",
]
