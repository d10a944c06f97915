"""The inbox worker tests' settings: three attempts, a second apart at most,
and a steps lease of a second (a busy delivery's copy comes back that soon)."""

from tests.faults.settings import *  # noqa: F403

INBOX = {"MAX_ATTEMPTS": 3, "RETRY_BACKOFF_MAX": 1, "STEPS_LEASE": 1}
