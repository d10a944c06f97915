"""The inbox worker tests' settings: three attempts, a second apart at most,
and a steps lease of a second (a busy delivery's copy comes back that soon)."""

from tests.faults.settings import *  # noqa: F403

INBOX = {"MAX_ATTEMPTS": 3, "RETRY_BACKOFF_MAX": 1, "STEPS_LEASE": 1}
# Redis's own visibility timeout, not the fault tests' 2 s: no worker here is
# killed, and a message a loaded machine holds longer (a retry waiting out its
# countdown, then its run) would come back as a second copy, one more run.
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {}
