"""The metrics switch: off costs nothing, on connects every app's counters,
and a switch that cannot work is refused."""

import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.dispatch import Signal
from django.test import override_settings

from idempotency import signals as keys_signals
from idempotency.checks import check_settings
from idempotency.shared import signals as shared_signals
from idempotency.shared.conf import shared_settings
from inbox import signals as inbox_signals
from outbox import signals as outbox_signals
from webhooks import signals as webhooks_signals

ROOT = Path(__file__).resolve().parents[3]

EVERY_SIGNAL = [
    getattr(module, name)
    for module in [
        keys_signals,
        shared_signals,
        outbox_signals,
        inbox_signals,
        webhooks_signals,
    ]
    for name in dir(module)
    if isinstance(getattr(module, name), Signal)
]


def counted(signal) -> bool:
    """Whether one of the apps' metric receivers listens to ``signal``."""
    return any(
        isinstance(key[0], str) and key[0].startswith("once-metrics:")
        for key, *_rest in signal.receivers
    )


def started(settings: str) -> str:
    """What a new process on ``settings`` imported after django.setup()."""
    code = (
        "import sys, django; django.setup(); "
        "print('prometheus_client' in sys.modules, "
        "sorted(m for m in sys.modules if m.split('.')[0] in "
        "('idempotency', 'outbox', 'inbox', 'webhooks') and 'metrics' in m))"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"DJANGO_SETTINGS_MODULE": settings, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_metrics_off_nothing_imports_prometheus_client():
    assert started("tests.settings") == "False ['idempotency.shared.metrics']"


def test_metrics_off_and_not_installed_the_mounted_view_answers_404():
    """The docs mount /metrics and say it answers 404 while metrics are off,
    which costs nothing: loading the URLconf must not need prometheus-client
    (without it, every URL of the project failed to resolve)."""
    code = (
        "import sys; sys.modules['prometheus_client'] = None; "
        "import django; django.setup(); "
        "from django.http import Http404; "
        "from django.test import RequestFactory; "
        "from django.urls import resolve; "
        "print(resolve('/t/widgets/').url_name, end=' '); "
        "view = resolve('/metrics').func\n"
        "try:\n"
        "    view(RequestFactory().get('/metrics'))\n"
        "except Http404 as off:\n"
        "    print(off)"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )

    assert ran.stdout.strip() == (
        "widget-list Metrics are off: IDEMPOTENCY['METRICS'] is False."
    ), ran.stderr[-2000:]


def test_metrics_on_the_apps_metric_modules_are_loaded_at_startup():
    assert started("tests.idempotency.prometheus.on_settings") == (
        "True ['idempotency.metrics', 'idempotency.shared.metrics', "
        "'inbox.metrics', 'outbox.metrics', 'webhooks.metrics']"
    )


def test_off_no_signal_has_a_receiver_of_ours():
    assert [signal for signal in EVERY_SIGNAL if counted(signal)] == []


def test_switching_on_connects_every_signal_and_off_disconnects_them():
    with override_settings(IDEMPOTENCY={"METRICS": True}):
        assert [signal for signal in EVERY_SIGNAL if not counted(signal)] == []
    assert [signal for signal in EVERY_SIGNAL if counted(signal)] == []


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_switch_that_is_not_a_boolean_is_refused(value, settings):
    settings.IDEMPOTENCY = {"METRICS": value}

    assert [error.id for error in check_settings()] == ["idempotency.E014"]
    with pytest.raises(ImproperlyConfigured, match="METRICS"):
        shared_settings.METRICS  # noqa: B018


def test_on_without_prometheus_client_is_refused(settings, monkeypatch):
    # What find_spec reports when the package is not installed.
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    settings.IDEMPOTENCY = {"METRICS": True}

    (error,) = check_settings()
    assert error.id == "idempotency.E014"
    assert "django-once[prometheus]" in error.hint
