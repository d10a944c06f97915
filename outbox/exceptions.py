"""Errors of the outbox.

Raised to the code that records or relays, never answered by a view of the
outbox: their ``type`` is ``about:blank``, their status what a view that let
one through would mean.
"""

from django.core.exceptions import ImproperlyConfigured

from idempotency.shared.exceptions import OnceError


class OutboxError(OnceError):
    """Base of the outbox's errors."""

    title = "Outbox error"


class NotInTransaction(OutboxError):
    """``record()`` ran outside ``transaction.atomic()``."""

    title = "An outbox event was recorded outside a transaction"


class EventInvalid(OutboxError, ValueError):
    """``record()`` was given a value the outbox table cannot store."""

    title = "An outbox event holds a value that cannot be stored"


class PublishError(OutboxError):
    """The broker did not take the message; the attempt counts as failed."""

    status = 503
    title = "The broker did not take the message"


class OutboxConfigurationError(OutboxError, ImproperlyConfigured):
    """The OUTBOX settings cannot work."""

    title = "The outbox is misconfigured"
