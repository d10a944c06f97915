"""Errors of the idempotency contract; each knows its HTTP answer."""

from django.core.exceptions import ImproperlyConfigured

from .shared.exceptions import OnceError


class IdempotencyError(OnceError):
    """Base of every refusal; rendered as RFC 9457 problem+json."""

    status = 400
    title = "Idempotency error"


class KeyMissing(IdempotencyError):
    status = 400
    type = "key-missing"
    title = "Idempotency-Key header is required"


class KeyMalformed(IdempotencyError):
    status = 400
    type = "key-malformed"
    title = "Idempotency-Key header is malformed"


class BodyTooDeep(IdempotencyError):
    status = 400
    type = "body-too-deep"
    title = "The request body is nested too deeply to read"


class AnonymousKey(IdempotencyError):
    status = 403
    type = "anonymous-key"
    title = "Idempotency keys need an authenticated client"


class AnonymousKeysExhausted(IdempotencyError):
    status = 429
    type = "anonymous-keys-exhausted"
    title = "Too many live anonymous idempotency keys for this operation"
    retry_after = 60


class PayloadMismatch(IdempotencyError):
    status = 422
    type = "key-reused"
    title = "Idempotency-Key was already used with a different request"


class RequestInFlight(IdempotencyError):
    status = 409
    type = "request-in-flight"
    title = "A request with this Idempotency-Key is still being processed"
    retry_after = 1


class LeaseLost(RequestInFlight):
    type = "lease-lost"
    title = "A newer attempt took over this Idempotency-Key"


class AnswerNotKept(IdempotencyError):
    status = 409
    type = "answer-not-kept"
    title = "The answer to this Idempotency-Key was not kept"


class AnswerNotShared(IdempotencyError):
    status = 409
    type = "answer-not-shared"
    title = "The answer to this Idempotency-Key belongs to another session"


class OperationAbandoned(IdempotencyError):
    """A steps-mode view raised ``Abandon``: its completed steps were undone."""

    status = 422
    type = "operation-abandoned"
    title = "The operation was abandoned and its completed steps undone"


class IdempotencyConfigurationError(ImproperlyConfigured):
    """A view or setting is configured in a way the contract cannot honour."""


class Invalid(Exception):
    """Raised by a producer: the request failed validation before any mutation.

    Not a refusal of the contract: it carries the view's own rendered answer
    (a DRF validation error, say) for the client. As at Stripe, such an answer
    is not saved: the claim is withdrawn, so the corrected retry with the same
    key runs (and the same request runs again).
    """

    def __init__(self, response):
        super().__init__(response.status_code)
        self.response = response
