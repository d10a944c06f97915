"""``@idempotent`` for function views, ``@api_view`` functions and the methods
of class-based views (DRF's APIView, Django's View)."""

import inspect
from collections.abc import Callable, Iterable
from datetime import timedelta
from functools import partial, wraps

from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.http import HttpRequest
from rest_framework.request import Request

from . import claims, rendering
from .conf import idempotency_settings
from .exceptions import IdempotencyConfigurationError


def idempotent(
    operation: str | Callable | None = None,
    *,
    required: bool = True,
    ttl: float | timedelta | None = None,
    mode: str = claims.ATOMIC,
    allow_anonymous: bool = False,
    exclude_fields: Iterable[str] = (),
) -> Callable:
    """Guard a view with idempotency keys.

    Use it bare (``@idempotent``) or with options. On DRF, put it *below*
    ``@api_view`` (or on an APIView method) so the key is claimed after
    authentication, permission and throttle checks. An ``async def`` function
    view works too.
    """
    if callable(operation):
        return idempotent()(operation)

    def decorator(view_func):
        if hasattr(view_func, "cls"):
            raise IdempotencyConfigurationError(
                f"@idempotent on {view_func.__qualname__} wraps a DRF view from "
                "outside; put it below @api_view so DRF authenticates first."
            )
        name = operation or f"{view_func.__module__}.{view_func.__qualname__}"
        # Checked here, once: the policy then serves every request as is.
        options = claims.view_options(
            lambda option: f"The {option} of {name!r}",
            mode=mode,
            ttl=ttl,
            exclude_fields=exclude_fields,
            required=required,
            allow_anonymous=allow_anonymous,
        )
        policy = claims.Policy(operation=name, scope=_resolve_scope, **options)

        @wraps(view_func)
        def wrapper(*args, **kwargs):
            request, rest, handler = _request_and_handler(view_func, args)
            if request.method in claims.UNGUARDED_METHODS:
                return handler(request, *rest, **kwargs)
            # An APIView's (or @api_view's) request is DRF's: it names the view.
            view = rendering.drf_view_of(request)
            if view is None:
                produce = rendering.django_producer(handler, request, rest, kwargs)
            else:
                produce = rendering.drf_producer(view, handler, request, rest, kwargs)
            return claims.execute(request, policy, produce)

        if iscoroutinefunction(view_func):
            wrapper = _async_view(view_func, policy)
        # Read by view_policy(): the schema and the checks find it there.
        wrapper.idempotency_policy = policy  # type: ignore[attr-defined]
        return wrapper

    return decorator


def view_policy(handler) -> claims.Policy | None:
    """The policy of an ``@idempotent`` view or handler, else None.

    ``handler`` is a function view, an APIView method, or the handler that
    ``@api_view`` puts on the class it builds: that one holds the decorated
    function in its closure, as ``func`` (``rest_framework.decorators``).
    """
    while handler is not None:
        policy = getattr(handler, "idempotency_policy", None)
        if isinstance(policy, claims.Policy):
            return policy
        wrapped = getattr(handler, "__wrapped__", None)
        if wrapped is None and callable(handler):
            wrapped = _api_view_function(handler)
        handler = wrapped
    return None


def _api_view_function(handler):
    code = getattr(handler, "__code__", None)
    if code is None or "func" not in code.co_freevars:
        return None
    return inspect.getclosurevars(handler).nonlocals.get("func")


def _request_and_handler(view_func, args):
    """Split a view's arguments into its request, the rest, and the handler.

    A function view gets the request first; a class-based view's method
    (DRF's APIView or Django's own View) gets its view first.
    """
    if isinstance(args[0], HttpRequest | Request):
        return args[0], args[1:], view_func
    return args[1], args[2:], partial(view_func, args[0])


def _async_view(view_func, policy):
    """Guard an ``async def`` function view.

    The claim, the view's database work and the stored answer share one
    transaction, and a transaction lives on one thread's connection. So the
    whole claim flow runs on the request's thread-sensitive sync thread and
    runs the view from there with ``async_to_sync``: the view awaits on the
    event loop, and its ORM calls (thread-sensitive ``sync_to_async``, as
    Django's async ORM uses) come back to that thread, inside the transaction.
    """

    @wraps(view_func)
    async def wrapper(*args, **kwargs):
        request, rest, handler = _request_and_handler(view_func, args)
        if request.method in claims.UNGUARDED_METHODS:
            return await handler(request, *rest, **kwargs)
        view = async_to_sync(handler)
        produce = rendering.django_producer(view, request, rest, kwargs)
        guarded = sync_to_async(claims.execute, thread_sensitive=True)
        return await guarded(request, policy, produce)

    return wrapper


def _resolve_scope(request):
    return idempotency_settings.SCOPE_RESOLVER(request)
