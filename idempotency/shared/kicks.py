"""Kick a drain after a commit, at most once per interval per process.

A drain (the outbox relay, the webhooks drain) works until nothing is left,
so one drain that starts after a commit covers it and every commit before
it. Hence a process starts its drains at least an interval apart: the first
commit after a quiet interval kicks one at once; a commit less than an
interval after the last drain's start schedules the next one an interval
after it (a Celery countdown), which every later commit until then shares.
A commit's drain starts at most one interval after it (plus the broker's and
a free worker's delay), and a busy process sends one kick per interval
however many commits it makes.
"""

import math
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from logging import Logger


class Kicker:
    def __init__(
        self,
        send: Callable[[float], None],
        interval: Callable[[], timedelta],
        logger: Logger,
        what: str,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        """``send(countdown)`` sends the drain task to start in ``countdown``
        seconds; ``interval()`` reads the app's setting at each kick; ``what``
        names the drain in the warning a lost kick logs. The clock is a
        parameter so tests move time instead of sleeping."""
        self.send = send
        self._interval = interval
        self._logger = logger
        self._what = what
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget the drains sent: the next commit kicks at once."""
        with self._lock:
            self._drain_at = -math.inf

    def kick(self) -> None:
        """Make sure a drain starts after this moment, sharing it if one will."""
        countdown = self._countdown(self._monotonic())
        if countdown is None:
            return
        try:
            self.send(countdown)
        except Exception:
            # A request must not fail on a broker outage: beat drains later.
            self._logger.warning("Could not kick %s", self._what, exc_info=True)
            # The next commit tries again instead of trusting a lost kick.
            self.reset()

    def _countdown(self, now: float) -> float | None:
        """Seconds until this commit's drain, or None when one is scheduled."""
        interval = self._interval().total_seconds()
        with self._lock:
            if now <= self._drain_at:
                return None  # the last drain sent starts after this commit
            # At once after a quiet interval, else an interval after the last.
            self._drain_at = max(now, self._drain_at + interval)
            return self._drain_at - now


def send_task(task, kwargs: dict | None = None) -> Callable[[float], None]:
    """A ``send`` for a Kicker: ``task.apply_async`` (with ``kwargs``) without a
    retry loop, so a request never hangs on a broker outage."""

    def send(countdown: float) -> None:
        options: dict = {"countdown": countdown} if countdown else {}
        if kwargs:
            options["kwargs"] = kwargs
        if task.app.conf.task_always_eager:
            task.apply_async(retry=False, **options)  # runs here: no broker
            return
        with task.app.producer_or_acquire() as producer:
            # One attempt: kombu's first connection otherwise retries for
            # broker_connection_timeout and more (6 s with Celery's defaults),
            # and every request that commits would wait that long.
            producer.connection.ensure_connection(max_retries=0)
            task.apply_async(retry=False, producer=producer, **options)

    return send
