"""The suite's settings with metrics on (for processes the tests start)."""

from tests.settings import *  # noqa: F403

IDEMPOTENCY = {"METRICS": True}
