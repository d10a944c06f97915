"""Scope resolvers: whose key is it?"""

ANONYMOUS = "anonymous"


def default_scope(request) -> str | None:
    """Return ``user:<pk>`` for an authenticated user, ``None`` otherwise.

    Point ``IDEMPOTENCY["SCOPE_RESOLVER"]`` at your own function to scope by
    tenant, API client or account instead. It must return a non-empty name
    (at most 255 characters) or ``None``, which means an anonymous client:
    refused (403) unless the view opts in, then in the shared scope
    ``"anonymous"``, capped by ``ANONYMOUS_MAX_KEYS``. Anything else, ``""``
    and ``"anonymous"`` included, is refused before the view runs: one scope
    for many principals would replay one's stored answers to another.
    """
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return None
