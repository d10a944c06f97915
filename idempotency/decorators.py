"""``@idempotent`` for function views, ``@api_view`` functions and APIView methods."""

from functools import partial, wraps

from django.http import HttpRequest
from rest_framework.request import Request

from . import claims, rendering
from .conf import idempotency_settings
from .exceptions import IdempotencyConfigurationError


def idempotent(
    operation=None,
    *,
    required=True,
    ttl=None,
    mode=claims.ATOMIC,
    allow_anonymous=False,
    exclude_fields=(),
):
    """Guard a view with idempotency keys.

    Use it bare (``@idempotent``) or with options. On DRF, put it *below*
    ``@api_view`` (or on an APIView method) so the key is claimed after
    authentication, permission and throttle checks.
    """
    if callable(operation):
        return idempotent()(operation)

    def decorator(view_func):
        if hasattr(view_func, "cls"):
            raise IdempotencyConfigurationError(
                f"@idempotent on {view_func.__qualname__} wraps a DRF view from "
                "outside; put it below @api_view so DRF authenticates first."
            )
        policy = claims.Policy(
            operation=operation or f"{view_func.__module__}.{view_func.__qualname__}",
            scope=_resolve_scope,
            required=required,
            mode=mode,
            ttl=ttl,
            allow_anonymous=allow_anonymous,
            exclude_fields=tuple(exclude_fields),
        )

        @wraps(view_func)
        def wrapper(*args, **kwargs):
            if isinstance(args[0], HttpRequest | Request):
                request, rest = args[0], args[1:]
                view = rendering.drf_view_of(request)
                handler = view_func
            else:
                view, request, rest = args[0], args[1], args[2:]
                handler = partial(view_func, view)
            if view is None:
                produce = rendering.django_producer(handler, request, rest, kwargs)
            else:
                produce = rendering.drf_producer(view, handler, request, rest, kwargs)
            return claims.execute(request, policy, produce)

        # Read by idempotency.openapi to document the guarded operation.
        wrapper.idempotency_policy = policy
        return wrapper

    return decorator


def _resolve_scope(request):
    return idempotency_settings.SCOPE_RESOLVER(request)
