"""Settings of the workers that drain a receipt whose handler kills them:
two retries a second apart, so it runs out of them within seconds, and a
retry sent to the test's own queue (``FAULTS_QUEUE``), which they consume.
An inbox consumer that kills them is dead after three runs."""

import os

from tests.faults.settings import *  # noqa: F403
from tests.faults.settings import INBOX, WEBHOOKS

WEBHOOKS = {**WEBHOOKS, "MAX_RETRIES": 2, "RETRY_BACKOFF_MAX": 1}
INBOX = {**INBOX, "MAX_ATTEMPTS": 3}
CELERY_TASK_DEFAULT_QUEUE = os.environ["FAULTS_QUEUE"]
