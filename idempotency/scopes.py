"""Scope resolvers: whose key is it?"""

import hashlib

from django.apps import apps
from django.contrib.auth import get_user_model

ANONYMOUS = "anonymous"
# The size of IdempotencyRecord.scope.
MAX_SCOPE_LENGTH = 255


def default_scope(request) -> str | None:
    """Return ``user:<pk>`` for an authenticated user, ``None`` otherwise
    (``user-sha256:<digest of pk>`` for a primary key too long for the scope).

    A principal of another model (an authentication of the project's own may
    make a merchant's API key ``request.user``) is named by its model's label,
    ``app.model:<pk>``: its primary keys are a sequence of their own, and
    ``user:<pk>`` would hand it a user's stored answers.

    Point ``IDEMPOTENCY["SCOPE_RESOLVER"]`` at your own function to scope by
    tenant, API client or account instead. It must return a non-empty name
    (at most 255 characters) or ``None``, which means an anonymous client:
    refused (403) unless the view opts in, then in the shared scope
    ``"anonymous"``, capped by ``ANONYMOUS_MAX_KEYS``. Anything else, ``""``
    and ``"anonymous"`` included, is refused before the view runs: one scope
    for many principals would replay one's stored answers to another.
    """
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    kind = _kind(user)
    scope = f"{kind}:{user.pk}"
    if len(scope) > MAX_SCOPE_LENGTH:
        # A text primary key too long for the column (an email address can
        # have 254 characters) is named by its digest; the other prefix
        # keeps it apart from every short key's scope.
        digest = hashlib.sha256(str(user.pk).encode()).hexdigest()
        scope = f"{kind}-sha256:{digest}"
    return scope


def _kind(user) -> str:
    """``user`` for the user model (its proxies and subclasses share its
    keys) and for a principal that is no model instance (simplejwt's
    ``TokenUser`` holds the user's pk); else the principal model's label."""
    meta = getattr(user, "_meta", None)
    if meta is None:
        return "user"
    if apps.is_installed("django.contrib.auth") and isinstance(user, get_user_model()):
        return "user"
    return meta.label_lower
