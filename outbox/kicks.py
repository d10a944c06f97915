"""Kick the relay after a commit, coalesced per transaction and per process.

A committed event must be followed by a relay run that starts after its
commit: the relay drains until the table is empty, so one such run covers
every event committed before it started. Hence two folds, each keeping that
rule:

* per transaction: the first ``on_commit`` callback of a transaction kicks,
  the ones of its other events find nothing left to do;
* per process: at most one kick is sent at once per ``KICK_INTERVAL``; a
  commit inside that window schedules one trailing kick at its end (with a
  Celery countdown), which every later commit of the window shares.

So a process sends at most two relay tasks per interval however many events
it records, and an event waits at most one interval for its kick. Beat's
``outbox.relay`` entry still drains whatever a lost kick (a broker outage)
left behind.
"""

import logging
import threading
import time

from django.db import transaction

from .conf import outbox_settings
from .tasks import relay

logger = logging.getLogger("outbox")


class RelayKicker:
    def __init__(self, monotonic=time.monotonic):
        # The clock is a parameter so tests move it instead of sleeping.
        self._monotonic = monotonic
        self._lock = threading.Lock()
        # Events recorded by this thread since its last kick. A rolled-back
        # transaction leaves its count behind; the next commit kicks anyway.
        self._recorded = threading.local()
        self.reset()

    def reset(self) -> None:
        """Forget the current window (tests start each from a clean slate)."""
        with self._lock:
            self._window_end = 0.0
            self._trailing_for: float | None = None
        self._recorded.count = 0

    def on_commit(self, using: str) -> None:
        """Kick the relay once the current transaction commits (if enabled)."""
        if not outbox_settings.KICK_ON_COMMIT:
            return
        self._recorded.count = getattr(self._recorded, "count", 0) + 1
        transaction.on_commit(self._after_commit, using=using, robust=True)

    def _after_commit(self) -> None:
        if not getattr(self._recorded, "count", 0):
            return  # this transaction's first event kicked already
        self._recorded.count = 0
        countdown = self._countdown(self._monotonic())
        if countdown is not None:
            self._send(countdown)

    def _countdown(self, now: float) -> float | None:
        """Seconds until this commit's kick, or None when one is scheduled."""
        interval = outbox_settings.KICK_INTERVAL.total_seconds()
        with self._lock:
            if now >= self._window_end:
                self._window_end = now + interval
                return 0.0
            if self._trailing_for == self._window_end:
                return None  # the window's trailing kick runs after this commit
            self._trailing_for = self._window_end
            return self._window_end - now

    def _send(self, countdown: float) -> None:
        try:
            # retry=False: a request must not hang on a broker outage; the
            # beat schedule drains what this kick would have.
            if countdown:
                relay.apply_async(countdown=countdown, retry=False)
            else:
                relay.apply_async(retry=False)
        except Exception:
            logger.warning("Could not kick the outbox relay", exc_info=True)
            # Let the next commit try again instead of trusting a lost kick.
            with self._lock:
                self._window_end, self._trailing_for = 0.0, None


relay_kicker = RelayKicker()
