"""Errors of the inbox."""


class InboxError(Exception):
    """Base of the inbox's errors."""


class MessageIdMissing(InboxError, ValueError):
    """No message id could be found for a delivery: it cannot be deduplicated."""


class MessageIdInvalid(InboxError, ValueError):
    """A message id the inbox cannot store as it is: too long, or holding NUL.

    Refused before the transaction starts, so nothing is claimed or applied.
    """
