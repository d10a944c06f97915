"""An adopter's project configured the way a team gets it wrong: each mistake
is refused by ``manage.py check`` and again where the running server uses it
(gunicorn and uwsgi run no checks), or it works.

The projects here keep ``startproject``'s SQLite database, as a staging
server copied from a tutorial would.
"""

import base64
import json
import secrets
import sqlite3
import uuid
from contextlib import contextmanager

import pytest

from .project import (
    ALL_APPS_BLOCKS,
    APP,
    PASSWORD,
    PROJECT,
    REDIS_URL,
    Project,
    api_headers,
    delete_redis_keys,
    free_port,
    post,
    wait_for_port,
)

pytestmark = pytest.mark.adopter

# The API and the problem types; the rest of the URLconf is the admin's.
URLS = """\
from django.urls import include, path

urlpatterns = [
    path("api/", include("orders.urls")),
    path("problems/", include("idempotency.urls")),
]
"""


@contextmanager
def server_without_checks(project):
    """``runserver --skip-checks``: the server as gunicorn runs it, unchecked."""
    port = free_port()
    command = [project.venv.python, "manage.py", "runserver", "--noreload"]
    command += ["--skip-checks", f"127.0.0.1:{port}"]
    with project.process("runserver", command) as server:
        wait_for_port(port, server)
        server.url = f"http://127.0.0.1:{port}"
        yield server


def sqlite_value(project, sql):
    with sqlite3.connect(project.file("db.sqlite3")) as db:
        return db.execute(sql).fetchone()[0]


@pytest.fixture(scope="module")
def debezium_on_sqlite(venv, adopter_workdir):
    """Keys and the outbox on SQLite, migrated, then switched to Debezium."""
    project = Project(adopter_workdir / "debezium-on-sqlite", venv)
    project.use("settings-keys", "models", "views-events", "urls-app")
    project.append(f"{PROJECT}/settings.py", 'INSTALLED_APPS += ["outbox"]\n')
    project.write(f"{PROJECT}/urls.py", URLS)
    project.set_up()
    project.append(f"{PROJECT}/settings.py", 'OUTBOX = {"RELAY": "debezium"}\n')
    return project


def test_check_refuses_debezium_mode_on_sqlite(debezium_on_sqlite):
    checked = debezium_on_sqlite.manage("check", check=False)
    assert checked.returncode != 0, checked.stdout
    assert "outbox.E011" in checked.stderr, checked.stderr


def test_the_running_server_refuses_an_event_debezium_would_never_see(
    debezium_on_sqlite,
):
    # Debezium reads PostgreSQL's WAL; record() deletes the row it inserts,
    # so on SQLite the order would commit and its event vanish unnoticed.
    project = debezium_on_sqlite
    with server_without_checks(project) as server:
        answer = post(
            f"{server.url}/api/orders/",
            json.dumps({"sku": "BOOK-1", "quantity": 1}).encode(),
            api_headers(key=f"order-{uuid.uuid4()}"),
        )
    assert answer.status == 500, answer.body.decode()[:2000]
    assert "OUTBOX['RELAY'] is 'debezium'" in server.log(), server.tail()
    assert sqlite_value(project, f"SELECT count(*) FROM {APP}_order") == 0


# A custom user model whose primary key is the email address: text, up to
# EmailField's 254 characters.
ACCOUNTS_MODELS = """\
from django.contrib.auth.models import AbstractBaseUser, BaseUserManager
from django.db import models


class UserManager(BaseUserManager):
    def create_superuser(self, email, password=None, **extra):
        user = self.model(email=email, is_staff=True, **extra)
        user.set_password(password)
        user.save()
        return user


class User(AbstractBaseUser):
    email = models.EmailField(primary_key=True)
    is_staff = models.BooleanField(default=False)

    USERNAME_FIELD = "email"
    objects = UserManager()
"""

# Legal (a 64-character local part, labels of at most 63), and as long as
# EmailField takes.
LONG_EMAIL = "a" * 64 + "@" + ".".join(["b" * 61] * 3) + ".com"


@pytest.fixture(scope="module")
def email_users(venv, adopter_workdir):
    """Keys on SQLite, with a custom user model keyed by email address."""
    project = Project(adopter_workdir / "email-users", venv)
    project.drop_admin_and_sessions()
    project.manage("startapp", "accounts")
    project.write("accounts/models.py", ACCOUNTS_MODELS)
    project.append(
        f"{PROJECT}/settings.py",
        'INSTALLED_APPS += ["accounts"]\nAUTH_USER_MODEL = "accounts.User"\n',
    )
    project.use("settings-keys", "models", "views-keys", "urls-app")
    project.write(f"{PROJECT}/urls.py", URLS)
    project.manage("makemigrations", "accounts", APP)
    project.manage("migrate")
    return project


def test_a_string_primary_key_needs_no_migration_of_ours(email_users):
    checked = email_users.manage("makemigrations", "--check", "--dry-run")
    assert "No changes detected" in checked.stdout, checked.stdout


def test_a_user_whose_key_is_a_long_email_gets_keyed_requests_replayed(email_users):
    assert len(LONG_EMAIL) == 254
    project = email_users
    project.manage(
        "createsuperuser",
        "--noinput",
        f"--email={LONG_EMAIL}",
        env={"DJANGO_SUPERUSER_PASSWORD": PASSWORD},
    )
    token = base64.b64encode(f"{LONG_EMAIL}:{PASSWORD}".encode()).decode()
    headers = {
        **api_headers(key=f"order-{uuid.uuid4()}"),
        "Authorization": f"Basic {token}",
    }
    body = json.dumps({"sku": "BOOK-1", "quantity": 1}).encode()
    with server_without_checks(project) as server:
        first = post(f"{server.url}/api/orders/", body, headers)
        second = post(f"{server.url}/api/orders/", body, headers)

    assert first.status == 201, first.body.decode()[:2000]
    assert second.status == 201, second.body.decode()[:2000]
    assert second.headers.get("Idempotent-Replayed") == "true"
    assert second.body == first.body
    assert sqlite_value(project, f"SELECT count(*) FROM {APP}_order") == 1


@pytest.fixture(scope="module")
def own_retries(venv, adopter_workdir):
    """The README's project, its consumer task given Celery's max_retries."""
    # The README's settings read both.
    env = {
        "CELERY_BROKER_URL": REDIS_URL,
        "GITHUB_WEBHOOK_SECRET": secrets.token_hex(32),
    }
    project = Project(adopter_workdir / "own-retries", venv, **env)
    # Should the worker start, it takes no other run's tasks.
    prefix = project.isolate_redis_keys()
    project.use(*ALL_APPS_BLOCKS)
    tasks = project.file(f"{APP}/tasks.py")
    documented = 'name="orders.ship")'
    assert documented in tasks.read_text()
    tasks.write_text(
        tasks.read_text().replace(documented, 'name="orders.ship", max_retries=3)')
    )
    try:
        yield project
    finally:
        delete_redis_keys(prefix)


def test_a_worker_refuses_a_consumer_task_with_a_retry_limit_of_its_own(
    own_retries,
):
    # Its last retry would raise instead of burying the message: requeued
    # at once, run again without backoff, and dead as if its worker died.
    command = [own_retries.venv.bin / "celery", "-A", PROJECT, "worker"]
    command += ["-P", "solo", "--without-gossip", "--without-mingle"]
    started = own_retries.run(
        [*command, "--without-heartbeat"], check=False, timeout=60
    )
    output = started.stdout + started.stderr
    assert started.returncode != 0, output[-4000:]
    assert "inbox.E006" in output, output[-4000:]
    assert "'orders.ship' runs an @consumer without max_retries=None" in output
