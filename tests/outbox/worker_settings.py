"""Settings of the `celery worker` the end-to-end test starts: the test
database the test process created, and the test broker."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

DATABASES["default"]["NAME"] = os.environ["ONCE_WORKER_DATABASE"]
