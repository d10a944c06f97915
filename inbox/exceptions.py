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


class SubscriberInvalid(InboxError, ValueError):
    """A subscriber name the inbox cannot store: too long, holding NUL or a
    character UTF-8 cannot encode, or not a string.

    Refused before any SQL: the database would refuse it in the middle of the
    caller's transaction, and a ``ConsumerTask`` could not bury the message.
    """

    status = 500
    title = "The subscriber name cannot be stored"


class StepsNotClaimed(InboxError, TypeError):
    """``delivery.step()`` on a delivery ``receive()`` claimed: its one
    transaction leaves no room for a step's own recovery point."""

    status = 500
    title = "Steps need a steps consumer"


class DeliveryBusy(OnceError):
    """Another worker holds this delivery's steps (its lease is live): this
    copy comes back after the lease, to resume if that worker died.

    Not an ``InboxError``: a ``ConsumerTask`` retries it and never buries it.
    """

    status = 409
    title = "Another worker is running this delivery's steps"


class DeliveryDied(InboxError):
    """A steps consumer's delivery whose runs killed their worker (out of
    memory, a hard time limit) ``INBOX["MAX_ATTEMPTS"]`` times: its unit is
    given up (the undos of its completed steps run) instead of resuming at
    the step that kills, and a ``ConsumerTask`` buries the message dead."""

    status = 500
    title = "The delivery's runs killed their worker"
