"""Settings whose INBOX the running worker must refuse: a count of attempts
given as text, as an environment variable read without int() gives it."""

from tests.inbox.worker_settings import *  # noqa: F403

INBOX = {"MAX_ATTEMPTS": "3", "RETRY_BACKOFF_MAX": 1, "STEPS_LEASE": 1}
