"""docs/observability.md's table of metrics is what the code exports: each
metric's name, type and labels, and no metric left out of it."""

import re
from pathlib import Path

import pytest
from django.test import override_settings
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

from idempotency.prometheus import collector

from .scraping import METRICS_ON

pytestmark = pytest.mark.django_db

PAGE = Path(__file__).resolve().parents[3] / "docs" / "observability.md"
# | `once_keys_total` | counter | operation, mode, outcome, reason | ... |
ROW = re.compile(r"^\| `(once_[a-z_]+)` \| (\w+) \|([a-z, ]*)\|", re.M)
# A counter's samples end in _total, which its family's name does not.
SUFFIX = {"counter": "_total"}


def documented() -> dict[str, tuple[str, tuple[str, ...]]]:
    rows = ROW.findall(PAGE.read_text())
    assert rows, "no metrics table found in docs/observability.md"
    return {
        name: (
            kind,
            tuple(label.strip() for label in labels.split(",") if label.strip()),
        )
        for name, kind, labels in rows
    }


def exported() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every once_ metric of the counters' registry and of the gauges, with
    its labels: a counter's as declared (one not counted yet has no sample),
    a gauge's from its samples."""
    found = {}
    for metric in list(REGISTRY._names_to_collectors.values()):
        if isinstance(metric, MetricWrapperBase) and metric._name.startswith("once_"):
            name = metric._name + SUFFIX.get(metric._type, "")
            found[name] = (metric._type, tuple(metric._labelnames))
    for family in collector.GaugeCollector().collect():
        labels = {label for sample in family.samples for label in sample.labels}
        found[family.name] = (family.type, tuple(sorted(labels)))
    return found


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_the_metrics_table_names_every_metric_with_its_type_and_labels():
    on_the_page = documented()
    in_code = exported()

    assert sorted(set(in_code) - set(on_the_page)) == [], "document these metrics"
    assert sorted(set(on_the_page) - set(in_code)) == [], "these are not exported"
    assert {name: in_code[name] for name in on_the_page} == on_the_page
