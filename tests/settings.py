"""The suite's settings, on the PostgreSQL server of ``tests.servers``.

The suite's own: it imports nothing of the demo project. Only the demo's shop
app is installed, so that its own tests (``tests/shop``) run in the same suite.
"""

import os
from pathlib import Path

from tests import servers

ROOT = Path(__file__).resolve().parent.parent

SECRET_KEY = "django-insecure-tests-only"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "idempotency",
    "outbox",
    "inbox",
    "webhooks",
    # The demo's app, for the demo's own tests (tests/shop) only.
    "project.shop",
    "tests.testapp",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "tests.testapp.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The demo's pages, for the demo's own tests.
        "DIRS": [ROOT / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": servers.database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS: list = []
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.BasicAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "idempotency.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "django-once tests",
    "VERSION": "1.0.0",
    # The schema endpoint is not part of the API it describes.
    "SERVE_INCLUDE_SCHEMA": False,
}

IDEMPOTENCY: dict = {}
# Publish into a list (allowed: this is a test run) and kick nothing: each
# test drains the relay itself.
OUTBOX = {
    "PUBLISHER": "outbox.publishers.InMemoryPublisher",
    "PUBLISHER_OPTIONS": {"allow_in_memory": True},
    "KICK_ON_COMMIT": False,
}
INBOX: dict = {}
# The sources the demo's handlers and the console's seed data use; the webhook
# tests set their own.
WEBHOOKS = {
    "SOURCES": {
        "github": {"VERIFIER": "github", "SECRETS": ["demo-github-webhook-secret"]},
        "stripe": {"VERIFIER": "stripe", "SECRETS": ["whsec_demo_stripe_secret"]},
        "standard": {
            "VERIFIER": "standard",
            "SECRETS": ["whsec_ZGVtby1zdGFuZGFyZC13ZWJob29rcy1zZWNyZXQhISE="],
        },
    },
}

# Celery (tests/celery.py): the processes the tests start get their broker
# through CELERY_BROKER_URL; otherwise kombu's filesystem transport, which
# needs no server.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    BROKER_DIR = ROOT / "var" / "test-broker"
    # kombu does not create the folders it writes to.
    (BROKER_DIR / "control").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR),
        "data_folder_out": str(BROKER_DIR),
        "control_folder": str(BROKER_DIR / "control"),
    }
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE = {
    "outbox-relay": {"task": "outbox.relay", "schedule": 30.0},
    "webhooks-enqueue-waiting": {"task": "webhooks.enqueue_waiting", "schedule": 300.0},
    "purge": {"task": "idempotency.purge", "schedule": 24 * 60 * 60.0},
}
