"""The plugin and the suites as a user's pytest sees them: a sub-session on the
suite's test settings runs suites against sound and broken code."""

import importlib.metadata
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from django.db import connection

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

SUITES = """
import uuid

import pytest

from idempotency.testing.suites import EndpointSuite
from inbox.testing.suites import ConsumerSuite
from tests.testapp.models import Widget
from tests.testing import broken


def new_widget():
    return {"name": uuid.uuid4().hex}


@pytest.mark.urls("tests.testing.urls")
class TestWidgets(EndpointSuite):
    url = "/t/widgets/"
    invalid_payload = {"name": ""}

    def payload(self):
        return new_widget()

    def effects(self):
        return Widget.objects.count()


class TestUnguardedWidgets(TestWidgets):
    url = "/broken/unguarded/"
    # Its consumer-side twin shows the other way to leave a case out.
    test_corrected_retry_after_a_validation_failure_runs = None


class TestApplyBeforeReceive(ConsumerSuite):
    consumer = broken.applies_before_receive
    event_type = "widget.wanted"

    def payload(self):
        return new_widget()

    def effects(self):
        return Widget.objects.count()
"""


def test_the_plugin_is_registered_and_imports_nothing_when_loaded():
    plugins = importlib.metadata.entry_points(group="pytest11")
    assert "idempotency.testing.plugin" in [plugin.value for plugin in plugins]
    # The entry point names each kit's plugin; loading them all costs nothing.
    probe = (
        "import importlib, json, sys, idempotency.testing.plugin as entry;"
        "[importlib.import_module(name) for name in entry.pytest_plugins];"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    top_level = set(json.loads(loaded.stdout))
    assert "pytest" in top_level
    assert not top_level & {"django", "rest_framework", "celery", "kombu"}


def test_the_one_entry_point_gives_every_kits_fixtures(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    options = ("-p", "no:cacheprovider", "-p", "no:django")

    fixtures = pytester.runpytest_subprocess(*options, "--fixtures")
    markers = pytester.runpytest_subprocess(*options, "--markers")

    for name in ("once_clock", "once_events", "once_webhooks"):
        fixtures.stdout.fnmatch_lines([f"{name} -- *"])
    markers.stdout.fnmatch_lines(["@pytest.mark.once: a django-once proof kit case*"])


def test_suites_in_a_users_session_pass_on_sound_code_and_fail_on_broken_code(
    pytester, monkeypatch
):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    if connection.vendor == "postgresql":
        settings = "tests.settings"
        # A database of its own: this session holds the suite's.
        name = connection.settings_dict["NAME"].removeprefix("test_")
        monkeypatch.setenv("TEST_DATABASE_NAME", f"{name}_pytester")
    else:
        settings = "tests.settings_sqlite"
    pytester.makepyfile(test_users_suites=textwrap.dedent(SUITES))

    result = pytester.runpytest_subprocess(
        f"--ds={settings}", "-p", "no:cacheprovider", "-m", "once", "-rs"
    )

    outcomes = result.parseoutcomes()
    sound = "test_users_suites.py::TestWidgets::"
    assert not [line for line in result.outlines if line.startswith(f"FAILED {sound}")]
    result.stdout.fnmatch_lines(
        [
            "*TestUnguardedWidgets.test_lost_response_replays_the_stored_answer*",
            "E * Guarantee broken: a retry after a lost response replays the "
            "stored answer and runs nothing.",
            "E *the view ran again: effects went 0 → 2 (expected 0 → 1)",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*TestApplyBeforeReceive.test_a_redelivered_message_is_applied_once*",
            "E * Guarantee broken: a redelivered message is applied once.",
        ]
    )
    result.stdout.fnmatch_lines(
        ["SKIPPED * set downstream (what the view calls for the outside world*"]
    )
    # Unguarded: all but the other-scope case fail (one left out, one skipped,
    # and the race skipped on SQLite); the consumer fails all three.
    unguarded = 5 if connection.vendor == "postgresql" else 4
    assert outcomes["failed"] == unguarded + 3, result.outlines[-15:]
