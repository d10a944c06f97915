"""Kick the drain after a receipt commits, at most once per interval per process.

The receipt rows are the queue: ``webhooks.drain`` processes received
receipts until none is left, so one drain that starts after a receipt's
commit covers it and every receipt committed before it. Hence a process
starts its drains at least ``KICK_INTERVAL`` apart: the first receipt after
a quiet interval kicks one at once; a receipt committed less than an
interval after the last drain's start schedules the next one an interval
after it (a Celery countdown), which every later receipt until then
shares. A receipt's drain starts at most one interval after its commit
(plus the broker's and a free worker's delay), and a busy process sends
one drain per interval however many deliveries it takes.

A lost kick (broker down) leaves its receipts ``received``: beat's
``webhooks.enqueue_waiting`` kicks again for receipts older than its
``older_than_seconds`` (300 by default).
"""

import logging
import math
import threading
import time

from .conf import webhooks_settings
from .tasks import drain

logger = logging.getLogger("webhooks")


class DrainKicker:
    def __init__(self, monotonic=time.monotonic, send=None):
        # The clock and the sender are parameters so tests move time instead
        # of sleeping and count kicks without a broker.
        self._monotonic = monotonic
        self._send_task = send or _send_drain
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget the drains sent: the next receipt kicks at once."""
        with self._lock:
            self._drain_at = -math.inf

    def kick(self) -> None:
        """Make sure a drain starts after this moment, sharing it if one will."""
        countdown = self._countdown(self._monotonic())
        if countdown is None:
            return
        try:
            self._send_task(countdown)
        except Exception:
            logger.warning("Could not kick the webhook drain", exc_info=True)
            # The next receipt tries again instead of trusting a lost kick.
            self.reset()

    def _countdown(self, now: float) -> float | None:
        """Seconds until this receipt's drain, or None when one is scheduled."""
        interval = webhooks_settings.KICK_INTERVAL.total_seconds()
        with self._lock:
            if now <= self._drain_at:
                return None  # the last drain sent starts after this commit
            # At once after a quiet interval, else an interval after the last.
            self._drain_at = max(now, self._drain_at + interval)
            return self._drain_at - now


def _send_drain(countdown: float) -> None:
    # retry=False: a request must not hang on a broker outage; the receipt
    # is committed and beat's enqueue_waiting kicks again.
    if countdown:
        drain.apply_async(countdown=countdown, retry=False)
    else:
        drain.apply_async(retry=False)


drain_kicker = DrainKicker()


def enqueue(receipt_id: int) -> None:
    """The default WEBHOOKS["ENQUEUE"]: kick the drain, which finds the receipt."""
    drain_kicker.kick()


def forget(*, setting, **kwargs) -> None:
    """Start a new window after the WEBHOOKS setting changes (``setting_changed``)."""
    if setting == webhooks_settings.namespace:
        drain_kicker.reset()
