"""Settings of the worker that finds a receipt's steps held by another: a
lease of a second, and two retries, fewer than the leases it waits out."""

from datetime import timedelta

from tests.faults.steps_settings import *  # noqa: F403
from tests.faults.steps_settings import WEBHOOKS

WEBHOOKS = {**WEBHOOKS, "STEPS_LEASE": timedelta(seconds=1), "MAX_RETRIES": 2}
