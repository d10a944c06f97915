"""The alert rules and the Grafana dashboard that ship in docs/observability/
name only metrics the code exports."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from .scraping import METRICS_ON, samples

pytestmark = pytest.mark.django_db

SHIPPED = Path(__file__).resolve().parents[3] / "docs" / "observability"
METRIC = re.compile(r"\bonce_[a-z0-9_]+\b")
# The series each type of metric is queried by.
SERIES = {
    "counter": ["_total"],
    "histogram": ["_bucket", "_sum", "_count"],
    "gauge": [""],
}


@pytest.fixture
def exported(client):
    """Every series name a scrape of the real registry offers."""
    with override_settings(IDEMPOTENCY=METRICS_ON):
        text = client.get("/metrics").content.decode()
    return {
        family.name + suffix
        for family in text_string_to_metric_families(text)
        if family.name.startswith("once_")
        for suffix in SERIES[family.type]
    }


def rule_expressions():
    rules = yaml.safe_load((SHIPPED / "alerts.yml").read_text())
    return {
        rule["alert"]: rule["expr"]
        for group in rules["groups"]
        for rule in group["rules"]
    }


def dashboard_expressions():
    dashboard = json.loads((SHIPPED / "grafana-dashboard.json").read_text())
    return {
        f"{panel['title']} {target['refId']}": target["expr"]
        for panel in dashboard["panels"]
        for target in panel["targets"]
    }


@pytest.mark.parametrize("expressions", [rule_expressions, dashboard_expressions])
def test_every_metric_named_is_one_the_code_exports(expressions, exported):
    unknown = {
        name: sorted(set(METRIC.findall(expr)) - exported)
        for name, expr in expressions().items()
    }

    assert {name: names for name, names in unknown.items() if names} == {}
    assert all(METRIC.search(expr) for expr in expressions().values())


def test_the_rules_cover_what_an_operator_must_be_woken_for():
    assert {
        "OnceOutboxBacklogOld",
        "OnceOutboxDeadMessages",
        "OnceStuckLeases",
        "OnceWebhookRejectionsSpiking",
        "OnceWebhookDrainFallingBehind",
        "OnceOutboxRelayFallingBehind",
    } <= set(rule_expressions())


def test_the_check_reads_the_names_it_checks(exported):
    # A scrape that offered nothing would let any name through.
    assert {"once_keys_total", "once_outbox_backlog"} <= exported
    assert "once_outbox_publish_lag_seconds_bucket" in exported


SELECTOR = re.compile(r"\b(once_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)="([^"]*)"')
# A worker that has counted nothing yet: its registry as the metrics modules
# make it, before any signal.
FRESH_SCRAPE = """
import django
django.setup()
from idempotency.shared import contributions
from prometheus_client import REGISTRY, generate_latest
contributions.metric_receivers()
print(generate_latest(REGISTRY).decode())
"""


def test_every_series_a_rule_selects_by_label_exists_before_anything_is_counted():
    # A series that only appears at its first count is absent until then, and
    # a comparison with an absent series is empty: "recorded > 1.1 *
    # published" stays silent while a relay has published nothing at all.
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    text = subprocess.run(
        [sys.executable, "-c", FRESH_SCRAPE],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[3],
    ).stdout
    fresh = samples(text)
    selected = {
        (name, tuple(sorted(MATCHER.findall(matchers))))
        for expr in rule_expressions().values()
        for name, matchers in SELECTOR.findall(expr)
    }

    assert selected  # the check reads the selectors it checks
    assert {series for series in selected if series not in fresh} == set()
