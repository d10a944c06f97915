"""Apps declare retention kinds, panels and series; the shared layer collects."""

from types import SimpleNamespace

from django.apps import apps

from idempotency.shared import contributions


def test_every_app_contributes_in_installed_apps_order():
    assert list(contributions.retention_kinds()) == [
        "idempotency",
        "units",
        "outbox",
        "inbox",
        "webhooks",
    ]
    assert list(contributions.unit_owners()) == ["keys", "inbox", "webhooks"]
    panels = [panel.__module__ for panel in contributions.console_panels()]
    assert panels == [
        "idempotency.ops",
        "idempotency.console.units",
        "outbox.ops",
        "inbox.ops",
        "webhooks.ops",
    ]
    labels = [str(label) for label, _counts in contributions.console_series()]
    assert labels == ["keys created", "events published", "receipts received"]


def test_the_first_app_to_declare_a_name_keeps_it(monkeypatch):
    first = SimpleNamespace(
        retention_kinds={"shared": ["idempotency.ops.purgeable"]},
        console_panels=["idempotency.ops.panel"],
        console_series=[("one", "idempotency.ops.created_per_hour")],
    )
    second = SimpleNamespace(
        retention_kinds={"shared": ["outbox.ops.purgeable"]},
        console_panels=["idempotency.ops.panel", "inbox.ops.panel"],
        console_series=[("two", "idempotency.ops.created_per_hour")],
    )
    monkeypatch.setattr(apps, "get_app_configs", lambda: [first, second])

    from idempotency import ops
    from inbox import ops as inbox_ops

    assert contributions.retention_kinds() == {"shared": [ops.purgeable]}
    assert contributions.console_panels() == [ops.panel, inbox_ops.panel]
    assert contributions.console_series() == [("one", ops.created_per_hour)]
