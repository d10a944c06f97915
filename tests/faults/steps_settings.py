"""Settings of the processes the steps fault tests start: short leases, so a
retry or a redelivery takes a killed worker's unit over within seconds."""

from datetime import timedelta

from tests.faults.settings import *  # noqa: F403
from tests.faults.settings import WEBHOOKS

IDEMPOTENCY = {"LEASE": timedelta(seconds=2)}
INBOX = {
    "STEPS_LEASE": timedelta(seconds=2),
    "RETRY_BACKOFF_MAX": timedelta(seconds=2),
    "MAX_ATTEMPTS": 20,
}
WEBHOOKS = {**WEBHOOKS, "STEPS_LEASE": timedelta(seconds=2)}
