"""Settings of the gunicorn server and Celery worker the trace test starts:
the test database, the test's Redis, a relay kicked on commit that sends
each order's event to the inbox consumer's task, and spans to files."""

import os

from tests.faults.settings import *  # noqa: F403
from tests.faults.settings import MIDDLEWARE
from tests.tracing import export_to_files_if_asked

# The process needs the suite's Celery app to kick the relay.
import tests.celery  # noqa: F401  isort: skip

MIDDLEWARE = ["tests.tracing.middleware.ServerSpanMiddleware", *MIDDLEWARE]
CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
OUTBOX = {
    "PUBLISHER": "outbox.publishers.CeleryTaskPublisher",
    "PUBLISHER_OPTIONS": {"tasks": {"order.created": "testapp.reserve_stock"}},
    "KICK_ON_COMMIT": True,
}

export_to_files_if_asked()
