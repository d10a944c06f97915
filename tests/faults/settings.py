"""Settings of the server processes the fault tests start: the test database."""

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, MIDDLEWARE, env

DATABASES["default"]["NAME"] = env("FAULTS_DATABASE_NAME")
MIDDLEWARE = ["tests.faults.middleware.DieAfterCommitMiddleware", *MIDDLEWARE]
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
