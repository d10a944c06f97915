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

from idempotency.testing.endpoints import Endpoint, check_other_scope
from idempotency.testing.suites import EndpointSuite
from inbox.testing.suites import ConsumerSuite
from tests.testapp.models import Widget
from tests.testing import broken


def new_widget():
    return {"name": uuid.uuid4().hex}


@pytest.mark.urls("tests.testing.urls")
class TestWidgets(EndpointSuite):
    url = "/t/widgets/"

    def payload(self):
        return new_widget()

    def invalid_payload(self):
        return {"name": ""}

    def changed_payload(self):
        return new_widget()

    def effects(self):
        return Widget.objects.count()


class TestUnguardedWidgets(TestWidgets):
    url = "/broken/unguarded/"
    # Its consumer-side twin shows the other way to leave a case out.
    test_corrected_retry_after_a_validation_failure_runs = None


def widget_count():
    return Widget.objects.count()


@pytest.mark.urls("tests.testing.urls")
@pytest.mark.django_db(transaction=True)
def test_users_own_check():
    unkeyed = Endpoint("/broken/unguarded/", new_widget, widget_count)
    check_other_scope(unkeyed)


class TestApplyBeforeReceive(ConsumerSuite):
    consumer = broken.applies_before_receive
    event_type = "widget.wanted"
    # tests/testing/test_failed_deliveries.py runs this case on broken code.
    test_a_failed_delivery_is_redelivered_and_applied_once = None

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


def users_session(pytester, monkeypatch) -> str:
    """Write the user's suites; return the --ds option of their session."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_users_suites=textwrap.dedent(SUITES))
    if connection.vendor != "postgresql":
        return "--ds=tests.settings_sqlite"
    # A database of its own: this session holds the suite's.
    name = connection.settings_dict["NAME"].removeprefix("test_")
    monkeypatch.setenv("TEST_DATABASE_NAME", f"{name}_pytester")
    return "--ds=tests.settings"


def test_suites_in_a_users_session_pass_on_sound_code_and_fail_on_broken_code(
    pytester, monkeypatch
):
    settings = users_session(pytester, monkeypatch)

    result = pytester.runpytest_subprocess(
        settings, "-p", "no:cacheprovider", "-m", "once", "-rs"
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
    # Unguarded: every case fails but one left out and the two downstream
    # ones skipped (the race is skipped on SQLite); the consumer fails all
    # three.
    unguarded = 9 if connection.vendor == "postgresql" else 8
    assert outcomes["failed"] == unguarded + 3, result.outlines[-15:]


def test_a_kits_failure_is_its_message_and_the_users_frame(pytester, monkeypatch):
    settings = users_session(pytester, monkeypatch)
    cases = "test_users_own_check or TestUnguardedWidgets and failed_attempt"

    short = pytester.runpytest_subprocess(
        settings, "-p", "no:cacheprovider", "-k", cases
    )
    verbose = pytester.runpytest_subprocess(
        settings, "-p", "no:cacheprovider", "-k", cases, "-v"
    )

    short.assert_outcomes(failed=2)
    # The suite's test lives in the kit: its own frame is the one shown.
    short.stdout.fnmatch_lines(
        [
            "*_ TestUnguardedWidgets.test_failed_attempt_*_retry_runs _*",
            "*suites.py:*: in test_failed_attempt_rolls_back_and_its_retry_runs",
            "    endpoints.check_failed_attempt(self.endpoint())",
            "E   *Guarantee broken: a failed attempt leaves no effect, and its retry "
            "runs.",
            "*_ test_users_own_check _*",
            "test_users_suites.py:*: in test_users_own_check",
            "    check_other_scope(unkeyed)",
            "E   *Guarantee broken: a stored answer is never returned to another "
            "scope.",
            "E     nothing was stored: is the view keyed?*",
            "(pytest -v shows the whole traceback and the captured log)",
        ]
    )
    # Django logs the 500 the kit caused, with its traceback: left out.
    assert "Traceback (most recent call last)" not in short.stdout.str()
    assert "Captured log call" not in short.stdout.str()
    verbose.assert_outcomes(failed=2)
    assert "Traceback (most recent call last)" in verbose.stdout.str()
    assert "pytest -v shows" not in verbose.stdout.str()
