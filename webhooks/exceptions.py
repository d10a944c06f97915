"""Errors of the webhooks app.

The intake view answers every refusal below with ``problems.from_exception``;
processing raises its failures to the worker, which retries or gives up.
"""

from django.core.exceptions import ImproperlyConfigured

from idempotency.shared.exceptions import OnceError

# Why a request was refused. A closed set: the rejection counter is keyed on it.
MISSING_HEADER = "missing-header"
MALFORMED_HEADER = "malformed-header"
BAD_SIGNATURE = "bad-signature"
BAD_TIMESTAMP = "bad-timestamp"
MALFORMED_BODY = "malformed-body"
NO_SECRET = "no-secret"
VERIFIER_ERROR = "verifier-error"
# Not a refusal: a signed body resent under another delivery id, answered as a
# duplicate and counted so the console shows someone replaying deliveries.
REPLAYED_BODY = "replayed-body"
# Not a refusal either: a delivery id seen before, now with another body. The
# sender reused an id for another event, which is answered as a duplicate and
# never runs; counted so the console shows the event lost.
CHANGED_BODY = "changed-body"
REASONS = (
    MISSING_HEADER,
    MALFORMED_HEADER,
    BAD_SIGNATURE,
    BAD_TIMESTAMP,
    MALFORMED_BODY,
    NO_SECRET,
    VERIFIER_ERROR,
    REPLAYED_BODY,
    CHANGED_BODY,
)


class SourceMisconfigured(ImproperlyConfigured):
    """A source's settings would weaken verification; its deliveries are refused."""


class WebhookError(OnceError):
    """Base of the webhooks app's errors."""

    status = 400
    title = "Webhook refused."


class UnknownSource(WebhookError):
    """The URL names no source in ``WEBHOOKS["SOURCES"]``."""

    status = 404
    type = "webhook-unknown-source"
    title = "Unknown webhook source."
    default_detail = "No webhook source is configured at this URL."


class SourceOutOfService(WebhookError):
    """The source is ``SourceMisconfigured``: it takes nothing until fixed.

    5xx, so the provider retries once the settings are fixed.
    """

    status = 500
    type = "webhook-misconfigured"
    title = "Webhook source misconfigured."


class BodyRefused(WebhookError):
    """A body taken as unreadable before verification."""

    title = "Webhook body refused."


class LengthRequired(BodyRefused):
    """A chunked body without a Content-Length, on a WSGI server that does not
    say where it ends (``wsgi.input_terminated``)."""

    status = 411
    type = "webhook-length-required"
    title = "Content-Length required."


class BodyTooLarge(BodyRefused):
    """The body is over the source's ``MAX_BODY_SIZE``: refused on its declared
    length, or after one byte past the limit was read."""

    status = 413
    type = "webhook-too-large"
    title = "Webhook body too large."


class EncodedBody(BodyRefused):
    """A compressed body: its signature covers the bytes sent, which this
    intake does not inflate."""

    status = 415
    type = "webhook-unsupported-encoding"
    title = "Webhook body must not be compressed."


class VerificationFailed(WebhookError):
    """The request is not an authentic, well-formed delivery.

    Its ``type`` is ``webhook-`` and the reason, one of ``REASONS``.
    """

    status = 401

    def __init__(self, reason: str, detail: str = ""):
        if reason not in REASONS:
            raise ValueError(f"unknown verification failure reason {reason!r}")
        self.reason = reason
        self.type = f"webhook-{reason}"
        if reason == MALFORMED_BODY:
            # A signed but unreadable body is the sender's bug, not a forgery.
            self.status = 400
        super().__init__(detail or reason.replace("-", " "))


class ReceiptBusy(WebhookError):
    """The receipt a delivery duplicates kept disappearing under its insert."""

    status = 503
    type = "webhook-busy"
    title = "Webhook receipt busy."
    retry_after = 1


class ProcessingFailed(WebhookError):
    """A stored receipt did not process; it says failed with the reason."""

    status = 500
    title = "Webhook processing failed."

    def __init__(self, receipt_id: int, message: str):
        super().__init__(message)
        self.receipt_id = receipt_id


class HandlerFailed(ProcessingFailed):
    """A handler raised; its work rolled back and the receipt says failed.

    ``last_attempt``: the receipt's runs are used up (``MAX_RETRIES``, its
    workers' deaths among them): nothing retries it.
    """

    def __init__(self, receipt_id: int, message: str, *, last_attempt: bool = False):
        super().__init__(receipt_id, message)
        self.last_attempt = last_attempt


class ReceiptUnreadable(ProcessingFailed):
    """A stored receipt could not be read (a value the database keeps but
    Python cannot hold); it says failed with the reason. Not retried: every
    read fails the same way."""


class WorkerDied(ProcessingFailed):
    """The receipt's handlers ran in a worker that died (killed out of memory
    or at a hard time limit), and with its runs that raised it ran more times
    than ``MAX_RETRIES`` allows; it says failed with the deaths' count. Not
    retried: its next run would kill its worker as well."""

    def __init__(self, receipt_id: int, deaths: int):
        super().__init__(
            receipt_id,
            f"receipt {receipt_id}: its handler's worker died {deaths} times",
        )
        self.deaths = deaths
