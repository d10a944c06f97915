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

Beat's ``outbox.relay`` entry still drains whatever a lost kick (a broker
outage) left behind.
"""

import logging
import threading
import time

from django.db import transaction

from idempotency.shared.kicks import Kicker, send_task

from .conf import outbox_settings
from .tasks import relay


class RelayKicker(Kicker):
    def __init__(self, monotonic=time.monotonic):
        # Events recorded by this thread since its last kick. A rolled-back
        # transaction leaves its count behind; the next commit kicks anyway.
        self._recorded = threading.local()
        super().__init__(
            send_task(relay),
            lambda: outbox_settings.KICK_INTERVAL,
            logging.getLogger("outbox"),
            "the outbox relay",
            monotonic=monotonic,
        )

    def reset(self) -> None:
        """Forget the kicks sent (tests start each from a clean slate)."""
        super().reset()
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
        self.kick()


relay_kicker = RelayKicker()
