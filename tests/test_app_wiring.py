"""The apps in projects that are not the demo: no admin, one app, a wrong mix.

Each case runs in a fresh interpreter: INSTALLED_APPS is fixed at setup.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SETUP = """
import json, sys, types
import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS={apps!r},
    DATABASES={{
        "default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
    }},
    ROOT_URLCONF="adopter_urls",
    REST_FRAMEWORK={{"DEFAULT_AUTHENTICATION_CLASSES": [],
                     "DEFAULT_PERMISSION_CLASSES": []}},
    SECRET_KEY="x",
    ALLOWED_HOSTS=["testserver"],
    USE_TZ=True,
)
urls = types.ModuleType("adopter_urls")
urls.urlpatterns = []
sys.modules["adopter_urls"] = urls
django.setup()
from django.core import checks
from django.core.management import call_command
"""


def run(apps, body):
    script = textwrap.dedent(SETUP).format(apps=apps) + textwrap.dedent(body)
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


BASE = ["django.contrib.contenttypes", "django.contrib.auth", "rest_framework"]

KEYED_POST_TWICE = """
from django.test import Client
from django.urls import include, path
from rest_framework.response import Response
from rest_framework.views import APIView
from idempotency.mixins import IdempotencyMixin

effects = []

class Orders(IdempotencyMixin, APIView):
    idempotency_allow_anonymous = True

    def post(self, request):
        effects.append(request.data)
        return Response({"order": len(effects)}, status=201)

urls.urlpatterns = [
    path("orders/", Orders.as_view()),
    path("problems/", include("idempotency.urls")),
]
call_command("migrate", verbosity=0)
client = Client()
answers = [
    client.post("/orders/", {"sku": "A"}, content_type="application/json",
                headers={"Idempotency-Key": "k1"})
    for _ in range(2)
]
print(json.dumps({
    "console": sorted(m for m in sys.modules if m.startswith("idempotency.console")),
    "statuses": [a.status_code for a in answers],
    "replayed": answers[1].get("Idempotent-Replayed"),
    "same_body": answers[0].content == answers[1].content,
    "effects": len(effects),
    "checks": [m.id for m in checks.run_checks()],
}))
"""


def test_idempotency_alone_without_admin_or_sessions_serves_keyed_requests():
    found = run([*BASE, "idempotency"], KEYED_POST_TWICE)
    assert found["statuses"] == [201, 201]
    assert found["replayed"] == "true"
    assert found["same_body"]
    assert found["effects"] == 1
    assert found["checks"] == []
    assert found["console"] == []  # the console never loaded


def test_all_four_apps_without_admin_set_up_and_migrate():
    apps = [*BASE, "idempotency", "outbox", "inbox", "webhooks"]
    found = run(apps, KEYED_POST_TWICE)
    assert found["effects"] == 1
    assert found["console"] == []
    # No Celery app is configured here: record() and the intake would send
    # their tasks to Celery's default broker, and the checks say so.
    assert sorted(found["checks"]) == ["outbox.W003", "webhooks.W003"]


@pytest.mark.parametrize(
    ("app", "check_id"),
    [("outbox", "outbox.E008"), ("inbox", "inbox.E003"), ("webhooks", "webhooks.E015")],
)
def test_an_app_without_idempotency_is_a_check_error_not_a_crash(app, check_id):
    found = run(
        [*BASE, app],
        """
        errors = [m for m in checks.run_checks() if m.is_serious()]
        print(json.dumps({"ids": [m.id for m in errors], "msg": errors[0].msg}))
        """,
    )
    assert found["ids"] == [check_id]
    assert "'idempotency'" in found["msg"]


@pytest.mark.parametrize(
    "load",
    [
        'include("idempotency.console.urls")',
        'importlib.import_module("idempotency.console.admin")',
    ],
    ids=["urls", "admin"],
)
def test_the_console_without_admin_names_the_missing_app(load):
    # Django's own refusal was a RuntimeError about LogEntry's app_label.
    found = run(
        [*BASE, "idempotency"],
        f"""
        import importlib
        from django.urls import include
        try:
            {load}
        except Exception as exc:
            print(json.dumps({{"error": type(exc).__name__, "msg": str(exc)}}))
        """,
    )
    assert found["error"] == "ImproperlyConfigured"
    assert "'django.contrib.admin'" in found["msg"]
    assert "idempotency.console" in found["msg"]


def test_metrics_without_admin_serve_every_apps_gauges():
    # The keys' gauges imported the console's admin module for its "stuck"
    # query: turning metrics on without the admin failed at startup.
    found = run(
        [*BASE, "idempotency", "outbox", "inbox", "webhooks"],
        """
        from django.test import Client, override_settings
        from django.urls import include, path

        urls.urlpatterns = [path("metrics", include("idempotency.prometheus.urls"))]
        call_command("migrate", verbosity=0)
        with override_settings(IDEMPOTENCY={"METRICS": True}):
            answer = Client().get("/metrics")
        print(json.dumps({
            "status": answer.status_code,
            "units_stuck": "once_units_stuck " in answer.content.decode(),
            "console": [m for m in sys.modules if m.startswith("idempotency.console")],
        }))
        """,
    )
    assert found["status"] == 200
    assert found["units_stuck"]
    assert "idempotency.console.admin" not in found["console"]


PURGE = """
from io import StringIO
from django.core.management import CommandError

call_command("migrate", verbosity=0)
out = StringIO()
call_command("purge_idempotency", stdout=out)
try:
    call_command("purge_idempotency", "--only", "webhooks", stdout=StringIO())
    refused = ""
except CommandError as exc:
    refused = str(exc)
print(json.dumps({
    "printed": out.getvalue().splitlines(),
    "refused": refused,
    "console": sorted(m for m in sys.modules if m.startswith("idempotency.console")),
}))
"""


def test_the_purge_runs_without_the_admin_on_the_apps_installed():
    # Rule 10: no django.contrib.admin unless the console is wanted; the
    # purge is retention, not the console.
    found = run([*BASE, "idempotency", "outbox"], PURGE)
    assert found["printed"] == [
        "idempotency: deleted 0",
        "units: deleted 0",
        "outbox: deleted 0",
    ]
    assert "Unknown retention kind(s): webhooks" in found["refused"]
    assert "idempotency.console.admin" not in found["console"]
