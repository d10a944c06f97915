"""Kick the drain after a receipt commits, at most once per interval per process.

The receipt rows are the queue: ``webhooks.drain`` processes received
receipts until none is left, so the shared rule (idempotency.shared.kicks)
applies: a receipt's drain starts at most ``KICK_INTERVAL`` after its commit,
and a busy process sends one drain per interval however many deliveries it
takes.

A lost kick (broker down) leaves its receipts ``received``: beat's
``webhooks.enqueue_waiting`` kicks again for receipts older than its
``older_than_seconds`` (300 by default).
"""

import logging
import time

from idempotency.shared.kicks import Kicker, send_task

from .conf import webhooks_settings
from .tasks import drain


def drain_kicks(send=None, monotonic=time.monotonic) -> Kicker:
    """The drain's kicker; tests give it a fake clock and count the sends."""
    return Kicker(
        send or send_task(drain),
        lambda: webhooks_settings.KICK_INTERVAL,
        logging.getLogger("webhooks"),
        "the webhook drain",
        monotonic=monotonic,
    )


drain_kicker = drain_kicks()


def enqueue(receipt_id: int) -> None:
    """The default WEBHOOKS["ENQUEUE"]: kick the drain, which finds the receipt."""
    drain_kicker.kick()


def forget(*, setting, **kwargs) -> None:
    """Start a new window after the WEBHOOKS setting changes (``setting_changed``)."""
    if setting == webhooks_settings.namespace:
        drain_kicker.reset()
