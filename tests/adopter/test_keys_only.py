"""``idempotency`` alone in an adopter's project: installed from the wheel,
without the admin, sessions or Celery, on PostgreSQL."""

import json
import uuid
from dataclasses import dataclass

import pytest

from .project import PROJECT, Database, Process, Project, api_headers, post

pytestmark = [pytest.mark.adopter, pytest.mark.postgresql]


# The route the README gives in prose; the rest of the URLconf is the admin's,
# which this project does not have.
URLS = """\
from django.urls import include, path

urlpatterns = [
    path("api/", include("orders.urls")),
    path("problems/", include("idempotency.urls")),
]
"""


@dataclass
class Site:
    project: Project
    database: Database
    server: Process


@pytest.fixture(scope="module")
def site(venv, adopter_workdir):
    project = Project(adopter_workdir / "keys-only", venv)
    project.drop_admin_and_sessions()
    database = Database()
    project.append(f"{PROJECT}/settings.py", database.settings())
    project.use("settings-keys", "models", "views-keys", "urls-app")
    project.write(f"{PROJECT}/urls.py", URLS)
    try:
        database.create()
        project.set_up()
        with project.server() as server:
            yield Site(project, database, server)
    finally:
        database.drop()


def test_the_apps_come_from_the_wheel_without_the_demo_dependencies(site):
    found = site.project.run(
        [
            site.project.venv.python,
            "-c",
            "import importlib.util, json, idempotency;"
            "print(json.dumps({'file': idempotency.__file__, 'missing': ["
            "m for m in ('environ', 'drf_spectacular', 'project')"
            " if importlib.util.find_spec(m) is None]}))",
        ]
    )
    found = json.loads(found.stdout)
    assert found["file"].startswith(str(site.project.venv.path)), found["file"]
    assert "site-packages" in found["file"]
    assert found["missing"] == ["environ", "drf_spectacular", "project"]


@pytest.mark.parametrize("name", ["idempotency", "outbox", "inbox", "webhooks"])
def test_startapp_refuses_the_names_the_package_occupies(site, name):
    # The README says so: these top-level names are ours once installed.
    refused = site.project.manage("startapp", name, check=False)
    assert refused.returncode != 0
    assert "conflicts with the name of an existing Python module" in refused.stderr


def test_check_is_clean_without_the_admin_or_sessions(site):
    settings = site.project.file(f"{PROJECT}/settings.py").read_text()
    assert "django.contrib.admin" not in settings
    assert "django.contrib.sessions" not in settings
    checked = site.project.manage("check", "--fail-level", "WARNING")
    assert "no issues" in checked.stdout


def test_a_keyed_post_sent_twice_creates_one_order_and_replays_the_answer(site):
    headers = api_headers(key=f"order-{uuid.uuid4()}")
    body = json.dumps({"sku": "BOOK-1", "quantity": 2}).encode()
    url = f"{site.server.url}/api/orders/"

    first = post(url, body, headers)
    second = post(url, body, headers)

    assert first.status == 201, first.body.decode() + site.server.tail()
    assert "Idempotent-Replayed" not in first.headers
    assert second.status == 201, second.body.decode() + site.server.tail()
    assert second.headers.get("Idempotent-Replayed") == "true"
    assert second.body == first.body
    assert json.loads(first.body)["sku"] == "BOOK-1"
    assert site.database.value("SELECT count(*) FROM orders_order") == 1
    stored = site.database.value(
        "SELECT state FROM idempotency_idempotencyrecord WHERE key = %s",
        headers["Idempotency-Key"],
    )
    assert stored == "completed"
