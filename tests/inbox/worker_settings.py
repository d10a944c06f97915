"""The inbox worker tests' settings: three attempts, a second apart at most."""

from tests.faults.settings import *  # noqa: F403

INBOX = {"MAX_ATTEMPTS": 3, "RETRY_BACKOFF_MAX": 1}
