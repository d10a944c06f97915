"""The console's dashboard and the gauges count the same rows the same way."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.test import override_settings
from django.utils import timezone

from idempotency.console.panels import COUNT_CAP
from outbox.models import OutboxMessage
from outbox.ops import _age

from .scraping import METRICS_ON, scrape, value
from .seeds import outbox_message, seed

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("metrics_on")]


@pytest.fixture
def metrics_on():
    with override_settings(IDEMPOTENCY=METRICS_ON):
        yield


@pytest.fixture
def dashboard(client, make_user):
    operator = make_user("operator", is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="view_opsdashboard"))
    client.force_login(operator)

    def figures():
        answer = client.get("/admin/ops/")
        assert answer.status_code == 200
        return {
            (panel.title, figure.label): figure.value
            for panel in answer.context["panels"]
            for figure in panel.figures
        }

    return figures


def test_every_figure_the_console_shows_is_a_gauge_of_the_same_value(client, dashboard):
    seed()

    figures = dashboard()
    gauges = scrape(client)

    pairs = [
        (("Idempotency keys", "pending keys"), "once_keys_pending", {}),
        (("Idempotency keys", "stuck leases"), "once_keys_stuck_leases", {}),
        (
            ("Units of work (steps)", "stuck mid-steps (lease expired)"),
            "once_units_stuck",
            {},
        ),
        (("Outbox", "backlog (pending)"), "once_outbox_backlog", {}),
        (("Outbox", "failing, backing off"), "once_outbox_retrying", {}),
        (("Outbox", "dead"), "once_outbox_dead", {}),
        (("Inbox", "dead messages"), "once_inbox_dead_messages", {}),
    ]
    for source in ["github", "stripe", "standard"]:
        for state, gauge in [
            ("received", "once_webhooks_receipts_waiting"),
            ("failed", "once_webhooks_receipts_failed"),
        ]:
            label = ("Webhook receipts", f"{source} · {state}")
            pairs.append((label, gauge, {"source": source}))
    for figure, gauge, labels in pairs:
        # The panel leaves out a source's zero figures; the gauge says 0.
        assert figures.get(figure, 0) == value(gauges, gauge, **labels), figure
    age = value(gauges, "once_outbox_oldest_pending_age_seconds")
    assert figures[("Outbox", "oldest pending age")] == _age(timedelta(seconds=age))
    # The seeds are counted, not an empty database's zeros.
    assert value(gauges, "once_outbox_backlog") == 3
    assert value(gauges, "once_units_stuck") == 2
    assert value(gauges, "once_webhooks_receipts_waiting", source="github") == 2


def test_past_the_cap_both_stop_counting_at_the_same_row(client, dashboard):
    now = timezone.now()
    OutboxMessage.objects.bulk_create(
        outbox_message(n, now) for n in range(COUNT_CAP + 5)
    )

    figures = dashboard()
    gauges = scrape(client)

    assert figures[("Outbox", "backlog (pending)")] == f"{COUNT_CAP}+"
    # The cap + 1, as the console's query counts it: "more than the cap".
    assert value(gauges, "once_outbox_backlog") == COUNT_CAP + 1
