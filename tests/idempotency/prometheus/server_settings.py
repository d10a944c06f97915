"""Settings of the gunicorn server the multiprocess test starts: the test
database, metrics on."""

from tests.faults.settings import *  # noqa: F403

IDEMPOTENCY = {"METRICS": True}
