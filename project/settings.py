"""Settings of the demo project, read from the environment (django-environ)."""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")

SECRET_KEY = env("SECRET_KEY", default="django-insecure-demo-only-change-me")
DEBUG = env.bool("DEBUG", default=True)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])

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
    "project.shop",
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

ROOT_URLCONF = "project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

WSGI_APPLICATION = "project.wsgi.application"

DATABASES = {
    "default": env.db_url(
        "DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = []

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
    "TITLE": "django-once demo shop",
    "DESCRIPTION": "Orders created with Idempotency-Key headers.",
    "VERSION": "1.0.0",
    # The schema endpoint is not part of the API it describes.
    "SERVE_INCLUDE_SCHEMA": False,
}

IDEMPOTENCY = {
    "TTL": env.int("IDEMPOTENCY_TTL_SECONDS", default=24 * 60 * 60),
}

# Webhook sources at /webhooks/<name>/. Secrets are comma-separated lists,
# newest first, so a rotation lists both; the defaults are for the demo only.
WEBHOOKS = {
    "SOURCES": {
        "github": {
            "VERIFIER": "github",
            "SECRETS": env.list(
                "WEBHOOK_GITHUB_SECRET", default=["demo-github-webhook-secret"]
            ),
        },
        "stripe": {
            "VERIFIER": "stripe",
            "SECRETS": env.list(
                "WEBHOOK_STRIPE_SECRET", default=["whsec_demo_stripe_secret"]
            ),
        },
        "standard": {
            "VERIFIER": "standard",
            "SECRETS": env.list(
                "WEBHOOK_STANDARD_SECRET",
                default=["whsec_ZGVtby1zdGFuZGFyZC13ZWJob29rcy1zZWNyZXQhISE="],
            ),
        },
    },
}

# Celery: a real broker when CELERY_BROKER_URL says so (redis://, amqp://);
# otherwise kombu's filesystem transport, which needs no server.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    BROKER_DIR = BASE_DIR / "var" / "broker"
    # kombu writes there but does not create the folders: without them the
    # first relay kick of a process that is not `rundemo` would fail.
    (BROKER_DIR / "control").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR),
        "data_folder_out": str(BROKER_DIR),
        # Exchange bindings (kombu writes them to ./control by default).
        "control_folder": str(BROKER_DIR / "control"),
    }
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE = {
    # The safety net: record() kicks the relay on commit; this drains whatever
    # a lost kick (broker down at that moment) left behind.
    "outbox-relay": {"task": "outbox.relay", "schedule": 30.0},
    # Receipts whose enqueue was lost (broker down at intake) get processed.
    "webhooks-enqueue-waiting": {"task": "webhooks.enqueue_waiting", "schedule": 300.0},
    # Retention: expired keys, old published messages, inbox rows, receipts.
    "purge": {"task": "idempotency.purge", "schedule": 24 * 60 * 60.0},
}

# The relay hands each order event to the shop's inbox consumer task, through
# the Celery broker above (Redis, or the filesystem transport).
OUTBOX = {
    "PUBLISHER": "outbox.publishers.CeleryTaskPublisher",
    "PUBLISHER_OPTIONS": {"tasks": {"order.created": "shop.reserve_stock"}},
}
INBOX = {}
