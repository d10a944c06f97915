"""Another worker holding a receipt's row lock, for the SKIP LOCKED tests."""

import threading
from contextlib import contextmanager

from django.db import connections, transaction

from webhooks.models import WebhookReceipt

# Longer than any wait a test allows, so queueing behind the lock shows.
HOLD = 5.0


@contextmanager
def receipt_held_by_another_worker(pk):
    """Hold ``pk``'s row lock from another thread and connection until the
    block ends (at most ``HOLD`` seconds)."""
    locked, release = threading.Event(), threading.Event()

    def holder():
        try:
            with transaction.atomic():
                WebhookReceipt.objects.select_for_update().get(pk=pk)
                locked.set()
                release.wait(HOLD)
        finally:
            connections.close_all()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert locked.wait(10), "the holder never took the lock"
        yield
    finally:
        release.set()
        thread.join(HOLD + 5)
