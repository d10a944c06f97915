"""Steps of one unit on worker threads, as docs/steps.md allows: for races
between sibling steps of one attempt."""

import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress

from django.db import connections


def on_threads(*calls) -> list:
    """Run each of ``calls`` on a thread of a pool, at once; return what each
    returned, or the exception it raised. Each thread closes its own database
    connections, as a worker's pool would on shutdown."""

    def run(call):
        try:
            return call()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(run, call) for call in calls]
    return [future.exception() or future.result() for future in futures]


def together(check, wait: float = 1):
    """``check``, its first two calls held until both have arrived (their
    arguments read), or ``wait`` seconds passed: one may wait for the other."""
    barrier = threading.Barrier(2)

    def meeting(*args, **kwargs):
        with suppress(threading.BrokenBarrierError):
            barrier.wait(wait)
        return check(*args, **kwargs)

    return meeting
