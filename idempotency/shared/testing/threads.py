"""Real threads on real connections: how the race checks send requests at once."""

import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connections

T = TypeVar("T")


def run_concurrently(
    count: int, func: Callable[[int], T], *, timeout: float = 60
) -> list[T]:
    """Run ``func(i)`` for ``i`` in ``range(count)``, each in its own thread.

    The threads are released together by a barrier. Each uses its own
    database connections (Django's are per thread) and closes them when done,
    so their transactions commit or roll back as in separate processes. The
    first error raised in a thread is raised here.
    """
    barrier = threading.Barrier(count)
    results: list = [None] * count
    errors: list[BaseException] = []

    def work(index):
        try:
            barrier.wait(timeout)
            results[index] = func(index)
        except BaseException as exc:  # handed to the caller below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    if any(thread.is_alive() for thread in threads):
        raise AssertionError(f"a thread did not finish within {timeout} s")
    if errors:
        raise errors[0]
    return results


__all__ = ["run_concurrently"]
