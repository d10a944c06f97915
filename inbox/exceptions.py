"""Errors of the inbox."""


class InboxError(Exception):
    """Base of the inbox's errors."""


class MessageIdMissing(InboxError, ValueError):
    """No message id could be found for a delivery: it cannot be deduplicated."""
