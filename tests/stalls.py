"""A worker that stalls past its lease once, at a point of its choosing,
while a newer worker runs in a thread of its own: for races between a
stalled worker waking and the one that took its lease over."""

import threading
from datetime import timedelta

from django.db import connection


class Stall:
    """``wrap(check)`` stalls the first call of ``check``, after it answers:
    the lease lapses (``clock``), ``newer`` starts in a thread, and the
    stalled worker waits until it has begun (``began``, which ``newer`` sets,
    and its end too) or has waited 2 s for it (it may wait on the stalled
    worker's lock). ``joined`` is for the stalled worker to set."""

    def __init__(self, clock, lease: timedelta, newer):
        self.clock, self.lease = clock, lease
        self.began, self.joined = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, args=(newer,))
        self._stalled = False

    def _run(self, newer) -> None:
        try:
            newer()
        finally:
            self.began.set()
            connection.close()

    def wrap(self, check):
        def stalling(*args, **kwargs):
            found = check(*args, **kwargs)
            if not self._stalled:
                self._stalled = True
                self.clock.advance(self.lease + timedelta(seconds=1))
                self.thread.start()
                self.began.wait(2)
            return found

        return stalling
