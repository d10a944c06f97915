"""Move the apps' clock forward without sleeping: TTLs and leases lapse at once.

Every app reads the time through ``idempotency.shared.clock.now``; this
replaces that function for a while, for every thread.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from idempotency.shared import clock


class ClockControl:
    """The apps' clock, shifted by ``offset`` from the real one."""

    def __init__(self):
        self.offset = timedelta(0)
        self._real_now = None

    def now(self) -> datetime:
        """What the apps read as the current time."""
        return (self._real_now or clock.now)() + self.offset

    def advance(self, delta: timedelta | None = None, **kwargs) -> None:
        """Move the clock forward by ``delta`` or by ``timedelta(**kwargs)``."""
        self.offset += delta if delta is not None else timedelta(**kwargs)

    def advance_to(self, moment: datetime) -> None:
        """Move the clock to ``moment``; it never goes back."""
        self.offset += max(moment - self.now(), timedelta(0))

    def advance_past(self, moment: datetime, margin=timedelta(seconds=1)) -> None:
        """Move the clock to just after ``moment`` (a TTL's or a lease's end)."""
        self.advance_to(moment + margin)

    def start(self) -> None:
        self._real_now = clock.now
        clock.now = self.now

    def stop(self) -> None:
        if self._real_now is not None:
            clock.now = self._real_now
            self._real_now = None


@contextmanager
def controlled_clock() -> Iterator[ClockControl]:
    """Control the apps' clock inside the block; the real one comes back after."""
    control = ClockControl()
    control.start()
    try:
        yield control
    finally:
        control.stop()


__all__ = ["ClockControl", "controlled_clock"]
