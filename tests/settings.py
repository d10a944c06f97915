"""Test settings: the demo project on the real PostgreSQL server."""

from project.settings import *  # noqa: F403
from project.settings import INSTALLED_APPS, env

DATABASES = {
    "default": env.db_url(
        "TEST_DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/postgres"
    )
}
DATABASES["default"]["TEST"] = {"NAME": env("TEST_DATABASE_NAME", default="test_once")}

INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp"]
ROOT_URLCONF = "tests.testapp.urls"

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
IDEMPOTENCY = {}
# Publish into a list (allowed: this is a test run) and kick nothing: each
# test drains the relay itself.
OUTBOX = {
    "PUBLISHER": "outbox.publishers.InMemoryPublisher",
    "PUBLISHER_OPTIONS": {"allow_in_memory": True},
    "KICK_ON_COMMIT": False,
}
INBOX = {}
