"""Errors of the outbox."""

from django.core.exceptions import ImproperlyConfigured


class OutboxError(Exception):
    """Base of the outbox's errors."""


class NotInTransaction(OutboxError):
    """``record()`` ran outside ``transaction.atomic()``."""


class PublishError(OutboxError):
    """The broker did not take the message; the attempt counts as failed."""


class OutboxConfigurationError(OutboxError, ImproperlyConfigured):
    """The OUTBOX settings cannot work."""
