"""Kick the relay after a commit, coalesced per transaction and per process.

A committed event must be followed by a relay run that starts after its
commit: the relay drains until the table is empty, so one such run covers
every event committed before it started. Hence two folds, each keeping that
rule:

* per transaction: the first ``on_commit`` callback of a transaction kicks,
  the ones of its other events find nothing left to do;
* per process: relay runs start at least ``KICK_INTERVAL`` apart, by the
  rule the webhooks drain shares (idempotency.shared.kicks): an event waits
  at most one interval for its kick, and a busy process sends one relay task
  per interval however many events it records.

Both are per database: an event recorded on another alias than the router's
(``record(..., using=...)``) kicks a relay that drains that alias.

Beat's ``outbox.relay`` entry still drains whatever a lost kick (a broker
outage) left behind.
"""

import logging
import threading
import time

from django.db import router, transaction

from idempotency.shared.kicks import Kicker, send_task

from .conf import outbox_settings
from .models import OutboxMessage
from .tasks import relay


class RelayKicker:
    def __init__(self, monotonic=time.monotonic):
        self._monotonic = monotonic
        # (Database alias, whether the router names it) -> the Kicker of its
        # relay runs.
        self._kickers: dict[tuple[str, bool], Kicker] = {}
        self._lock = threading.Lock()
        # Events recorded by this thread since its last kick, per alias. A
        # rolled-back transaction leaves its count behind; the next commit
        # kicks anyway.
        self._recorded = threading.local()

    def reset(self) -> None:
        """Forget the kicks sent (tests start each from a clean slate)."""
        with self._lock:
            self._kickers.clear()
        self._recorded.counts = {}

    def on_commit(self, using: str) -> None:
        """Kick the relay of ``using`` once the current transaction commits (if
        enabled)."""
        if not outbox_settings.KICK_ON_COMMIT:
            return
        counts = self._counts()
        counts[using] = counts.get(using, 0) + 1
        transaction.on_commit(
            lambda: self._after_commit(using), using=using, robust=True
        )

    def kick(self, using: str) -> None:
        self._kicker(using).kick()

    def _after_commit(self, using: str) -> None:
        if not self._counts().pop(using, 0):
            return  # this transaction's first event kicked already
        self.kick(using)

    def _counts(self) -> dict:
        if not hasattr(self._recorded, "counts"):
            self._recorded.counts = {}
        return self._recorded.counts

    def _kicker(self, using: str) -> Kicker:
        # The router's alias is the task's default: no argument, as beat's
        # entry sends it. Another one is named, or its relay would drain the
        # router's database and never this one. Asked at each kick: the
        # router can change (override_settings(DATABASE_ROUTERS=...)).
        routed = using == router.db_for_write(OutboxMessage)
        with self._lock:
            if (using, routed) not in self._kickers:
                self._kickers[using, routed] = Kicker(
                    send_task(relay, None if routed else {"using": using}),
                    lambda: outbox_settings.KICK_INTERVAL,
                    logging.getLogger("outbox"),
                    "the outbox relay",
                    monotonic=self._monotonic,
                )
            return self._kickers[using, routed]


relay_kicker = RelayKicker()
