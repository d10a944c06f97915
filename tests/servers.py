"""The servers the suite uses, read from environment variables here and
nowhere else ("Running the tests" in docs/index.md lists them). Each default is
the layout the suite was written on: everything on 127.0.0.1.
"""

import os
from urllib.parse import unquote, urlsplit


def _env(name: str, default: str) -> str:
    # An empty variable counts as unset, as a CI matrix leaves some empty.
    return os.environ.get(name) or default


# PostgreSQL: the server, and the database the suite creates and drops on it.
DATABASE_URL = _env("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
DATABASE_NAME = _env("TEST_DATABASE_NAME", "test_once")
# Django's server_side_binding option: PostgreSQL types each parameter itself,
# where client-side binding sends literals, so the apps' hand-written SQL is
# proven under both (make test's Django 6.x run sets it).
SERVER_SIDE_BINDING = _env("TEST_DATABASE_SERVER_SIDE_BINDING", "0")
if SERVER_SIDE_BINDING not in ("0", "1"):
    raise ValueError(
        f"TEST_DATABASE_SERVER_SIDE_BINDING must be 0 or 1: {SERVER_SIDE_BINDING!r}"
    )

# RabbitMQ.
AMQP_URL = _env("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")

# Redis: the server, and one database per group of tests, which may flush or
# scan it; change one when another program uses that database.
REDIS_URL = _env("TEST_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/")


def _redis_db(variable: str, default: int) -> str:
    return f"{REDIS_URL}/{_env(variable, str(default))}"


OUTBOX_REDIS_URL = _redis_db("TEST_REDIS_DB_OUTBOX", 11)
OUTBOX_HEADERS_REDIS_URL = _redis_db("TEST_REDIS_DB_OUTBOX_HEADERS", 6)
INBOX_REDIS_URL = _redis_db("TEST_REDIS_DB_INBOX", 9)
FAULTS_REDIS_URL = _redis_db("TEST_REDIS_DB_FAULTS", 13)
ADOPTER_REDIS_URL = _redis_db("TEST_REDIS_DB_ADOPTER", 15)
TRACING_REDIS_URL = _redis_db("TEST_REDIS_DB_TRACING", 7)


def database() -> dict:
    """The DATABASES entry of ``TEST_DATABASE_URL`` (PostgreSQL only: the
    SQLite subset has settings of its own)."""
    url = urlsplit(DATABASE_URL)
    if url.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"TEST_DATABASE_URL must be a postgres:// URL: {url.scheme}")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(url.path.lstrip("/")) or "postgres",
        "USER": unquote(url.username or ""),
        "PASSWORD": unquote(url.password or ""),
        "HOST": url.hostname or "",
        "PORT": url.port or "",
        "TEST": {"NAME": DATABASE_NAME},
        "OPTIONS": {"server_side_binding": True} if SERVER_SIDE_BINDING == "1" else {},
    }
