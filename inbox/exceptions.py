"""Errors of the inbox.

Raised to the consumer that receives, never answered by a view of the inbox:
their ``type`` is ``about:blank``, their status what a view that let one
through would mean.
"""

from idempotency.shared.exceptions import OnceError


class InboxError(OnceError):
    """Base of the inbox's errors."""

    title = "Inbox error"


class MessageIdMissing(InboxError, ValueError):
    """No message id could be found for a delivery: it cannot be deduplicated."""

    status = 400
    title = "The message has no id to deduplicate it by"


class MessageIdInvalid(InboxError, ValueError):
    """A message id the inbox cannot store as it is: too long, or holding NUL.

    Refused before the transaction starts, so nothing is claimed or applied.
    """

    status = 400
    title = "The message id cannot be stored"
