"""The alert rules and the Grafana dashboard that ship in docs/observability/
name only metrics the code exports."""

import json
import re
from pathlib import Path

import pytest
import yaml
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from .scraping import METRICS_ON

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
