"""An adopter's project configured the way a team gets it wrong: each mistake
is refused by ``manage.py check`` and again where the running server uses it
(gunicorn and uwsgi run no checks), or it works.

The projects here keep ``startproject``'s SQLite database, as a staging
server copied from a tutorial would.
"""

import json
import sqlite3
import uuid
from contextlib import contextmanager

import pytest

from .project import (
    APP,
    PROJECT,
    Project,
    api_headers,
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
