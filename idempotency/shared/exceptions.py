"""The base of every app's errors, and the settings validators' error.

Each app's ``exceptions`` module subclasses ``OnceError``; class attributes
say the HTTP answer, and ``problems.from_exception`` renders any of them as
RFC 9457 problem+json. Configuration errors subclass ``ImproperlyConfigured``.
"""

import math


class OnceError(Exception):
    """Base of every error the apps raise; rendered as RFC 9457 problem+json.

    ``type`` is a slug under ``PROBLEM_BASE_URI`` (one section of
    ``problem_types.md`` each), or ``about:blank`` for errors the apps raise
    to their caller and never answer themselves.
    """

    status = 500
    type = "about:blank"
    title = "Server error"
    # What the answer's detail says when the raise gives none, as in DRF.
    default_detail: str | None = None
    retry_after: int | None = None

    def __init__(self, detail=None, *, retry_after=None):
        self.detail = detail or self.default_detail or self.title
        if retry_after is not None:
            # Retry-After takes whole seconds; never tell a client "now".
            self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(self.detail)


class InvalidSetting(ValueError):
    """A validator refused a value; the message says what it expects.

    ``check_id`` overrides the option's own id for a problem that has one.
    """

    def __init__(self, message: str, hint: str = "", *, check_id: str = ""):
        super().__init__(message)
        self.hint = hint
        self.check_id = check_id


class ClaimRaced(Exception):
    """A claim in a transaction of its own met a row committed after its
    snapshot (``idempotency.shared.isolation``): nothing has run yet, and the
    claim is to be taken again in a new transaction. Never leaves the apps."""
