"""Work that runs when it is called.

A consumer or a webhook handler runs inside the transaction that records its
message or receipt as done. An ``async def`` function or a generator function
returns an object whose body runs later, or never: the message would be
marked done with nothing applied, and its redelivery dropped as a duplicate.
"""

import inspect
from collections.abc import Callable

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import ImproperlyConfigured


def refuse_deferred(func: Callable, what: str) -> None:
    """Refuse ``func`` where it is registered if calling it runs nothing."""
    if (
        iscoroutinefunction(func)
        or inspect.isgeneratorfunction(func)
        or inspect.isasyncgenfunction(func)
    ):
        raise ImproperlyConfigured(
            f"{what} {func!r} is async or a generator (it yields): it runs in "
            "the transaction that records it as done, in a worker, and must "
            "be a plain function."
        )


def run_now(what: str, func: Callable, *args, **kwargs):
    """Call ``func``; refuse an awaitable or a generator it returns, which
    nothing would run (its transaction then rolls back, as on an error)."""
    result = func(*args, **kwargs)
    if inspect.isgenerator(result) or inspect.iscoroutine(result):
        result.close()  # no "never awaited" warning on top of the error
    if (
        inspect.isawaitable(result)
        or inspect.isgenerator(result)
        or inspect.isasyncgen(result)
    ):
        raise ImproperlyConfigured(
            f"{what} {func!r} returned an awaitable or a generator, which "
            "nothing runs: it must do its work before it returns."
        )
    return result
