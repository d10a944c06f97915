"""Scope resolvers: whose key is it?"""

ANONYMOUS = "anonymous"


def default_scope(request) -> str | None:
    """Return ``user:<pk>`` for an authenticated user, ``None`` otherwise.

    Point ``IDEMPOTENCY["SCOPE_RESOLVER"]`` at your own function to scope by
    tenant, API client or account instead.
    """
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return None
