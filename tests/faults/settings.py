"""Settings of the server processes the fault tests start: the test database."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, MIDDLEWARE

DATABASES["default"]["NAME"] = os.environ["FAULTS_DATABASE_NAME"]
MIDDLEWARE = ["tests.faults.middleware.DieAfterCommitMiddleware", *MIDDLEWARE]
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
# A message a killed worker held unacked goes back to the queue within seconds
# (Redis's default visibility timeout is an hour), and workers look every second.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 2,
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
    "unacked_mutex_expire": 5,
}
