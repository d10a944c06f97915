"""Errors of the idempotency contract; each knows its HTTP answer."""

from django.core.exceptions import ImproperlyConfigured

from .shared.exceptions import OnceError


class IdempotencyError(OnceError):
    """Base of every refusal; rendered as RFC 9457 problem+json."""

    status = 400
    title = "Idempotency error"


class KeyMissing(IdempotencyError):
    """The view requires a key (``required=True``) and the request sent none."""

    type = "key-missing"
    title = "Idempotency-Key header is required"


class KeyMalformed(IdempotencyError):
    """The header is not one key: empty, too long, not visible ASCII, sent
    twice (a list), or a quoted string that is open or badly escaped."""

    type = "key-malformed"
    title = "Idempotency-Key header is malformed"


class BodyTooDeep(IdempotencyError):
    """The body nests deeper than the fingerprint, or the view's parser, can
    read: the client's fault, answered 400 rather than 500."""

    type = "body-too-deep"
    title = "The request body is nested too deeply to read"


class AnonymousKey(IdempotencyError):
    """The scope resolver found no client for a keyed request, and the view
    does not let anonymous clients share the "anonymous" scope."""

    status = 403
    type = "anonymous-key"
    title = "Idempotency keys need an authenticated client"


class AnonymousKeysExhausted(IdempotencyError):
    """Anonymous clients hold ``ANONYMOUS_MAX_KEYS`` live keys for this
    operation already; retry once some expire."""

    status = 429
    type = "anonymous-keys-exhausted"
    title = "Too many live anonymous idempotency keys for this operation"
    default_detail = (
        "Anonymous clients hold as many live keys for this operation as it "
        "allows. Retry after Retry-After seconds, or authenticate."
    )
    retry_after = 60


class PayloadMismatch(IdempotencyError):
    """The key came back with another method, path or body: a client bug, never
    answered with the stored response."""

    status = 422
    type = "key-reused"
    title = "Idempotency-Key was already used with a different request"


class RequestInFlight(IdempotencyError):
    """Another request holds the key and has not finished, or its steps are
    being compensated; ``Retry-After`` says when to look again."""

    status = 409
    type = "request-in-flight"
    title = "A request with this Idempotency-Key is still being processed"
    default_detail = (
        "Another request with this key has not finished. Send this request "
        "again, with the same key, after Retry-After seconds: it then gets "
        "that request's answer."
    )
    retry_after = 1


class LeaseLost(RequestInFlight):
    """This attempt outlived its lease and a newer one took the key, so its
    answer is not stored."""

    type = "lease-lost"
    title = "A newer attempt took over this Idempotency-Key"


class AnswerNotKept(IdempotencyError):
    """The first request completed but its answer could not be stored (over
    ``MAX_STORED_BODY``, a non-error status ``STORE_STATUS`` declines, the
    session's CSRF token in it, cookies for a client without a session); its
    work is kept and not run again."""

    status = 409
    type = "answer-not-kept"
    title = "The answer to this Idempotency-Key was not kept"


class AnswerNotShared(IdempotencyError):
    """The stored answer set cookies or a session for another client; it is not
    replayed to this one."""

    status = 409
    type = "answer-not-shared"
    title = "The answer to this Idempotency-Key belongs to another session"


class OperationAbandoned(IdempotencyError):
    """A view raised ``Abandon``: its work rolled back (in steps mode, its
    completed steps were undone)."""

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
