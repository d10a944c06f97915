"""What the keys' checks prove, one sentence per guarantee: the first line of
every failure names it. The reporting is shared by every kit."""

from idempotency.shared.testing.guarantees import (  # noqa: F401
    CannotCheck,
    GuaranteeBroken,
    Problems,
    answer,
    broken,
    change,
    content,
    excerpt,
    measure,
    once_verdict,
    shown,
)

LOST_RESPONSE = (
    "a retry after a lost response replays the stored answer and runs nothing"
)
RACE = (
    "identical requests racing on one key make one effect; every other answer "
    "is the stored one or 409 with Retry-After"
)
PAYLOAD_MISMATCH = "the same key with another payload is refused with 422"
FAILED_ATTEMPT = "a failed attempt leaves no effect, and its retry runs"
VALIDATION = (
    "a request that failed validation is not stored: the corrected retry with "
    "the same key runs"
)
WITHIN_TTL = "within its TTL a key replays its stored answer"
RETRY_HORIZON = "a key outlives every retry the client can still send"
EXPIRED = (
    "after its TTL a key is forgotten and a late retry runs as new (documented: "
    "retention is per operation)"
)
CRASH_AFTER_COMMIT = (
    "a request whose process dies right after its work commits has made each "
    "effect once: its retry replays the stored answer, and nothing left for "
    "after the commit is lost"
)
OTHER_SCOPE = "a stored answer is never returned to another scope"
DERIVED_KEY = "a step retried after a crash calls downstream with the same derived key"
CRASH_AFTER_STEP = (
    "a steps-mode view killed right after any of its steps runs each step's "
    "effect once in the end: its retry resumes, repeating nothing"
)
COMPENSATION = (
    "a steps-mode view's unit that gives up undoes each completed step's "
    "effect exactly once, last step first, also when its compensation dies "
    "midway and is resumed"
)
FINGERPRINT = (
    "every payload field the view does not exclude on purpose is in the "
    "fingerprint: the same key with that field changed is refused with 422"
)
FAILURE_NOT_STORED_AS_SUCCESS = (
    "a failure after the view's own writes is never stored as a success: the "
    "attempt fails, leaves no effect, and its retry runs"
)
SCOPED_DOWNSTREAM_KEY = (
    "downstream keys are scoped: two scopes sending the same key call "
    "downstream with different keys"
)
# The evidence of a case run against a view that stores nothing.
NOTHING_STORED = (
    "nothing was stored: is the view keyed? (no idempotency record for the "
    "key: guard the view with IdempotencyMixin or @idempotent)"
)
