"""The counters of what the apps share: the purge's rows, durable steps and
compensations by kind."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from idempotency.models import IdempotencyRecord
from idempotency.shared import retention
from idempotency.shared.steps.models import UnitRecord
from tests.testapp import steps_views

from .scraping import METRICS_ON, scrape, value

pytestmark = pytest.mark.django_db(transaction=True)


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_the_purge_counts_the_rows_it_deleted_by_kind(client):
    now = timezone.now()
    IdempotencyRecord.objects.bulk_create(
        IdempotencyRecord(
            scope="user:1",
            operation="op",
            key=f"old-{n}",
            request_hash="h",
            state="completed",
            created_at=now - timedelta(days=2),
            expires_at=now - timedelta(days=1),
        )
        for n in range(3)
    )
    before = value(scrape(client), "once_purged_rows_total", kind="idempotency")

    retention.purge(only=["idempotency"])

    after = value(scrape(client), "once_purged_rows_total", kind="idempotency")
    assert after - before == 3


def steps(scraped, step, *, undo="false", kind="keys"):
    return value(scraped, "once_steps_total", kind=kind, step=step, undo=undo)


@pytest.fixture
def payments():
    steps_views.reset()
    yield "/t/payment/"
    steps_views.reset()


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_each_step_and_each_undo_is_counted_once_by_kind_and_name(
    api, client, payments
):
    before = scrape(client)

    api.post(payments, {"amount": 500}, key="paid-key-1234")
    api.post(payments, {"amount": 500}, key="paid-key-1234")  # a replay: no step
    api.post(payments, {"amount": 500, "ship": False}, key="abandoned-key-5678")

    after = scrape(client)
    counted = {
        (step, undo): steps(after, step, undo=undo) - steps(before, step, undo=undo)
        for step, undo in [
            ("charge", "false"),
            ("payment", "false"),
            ("mail", "false"),
            ("undo:charge", "true"),
        ]
    }
    assert counted == {
        ("charge", "false"): 2,
        ("payment", "false"): 1,
        ("mail", "false"): 1,
        ("undo:charge", "true"): 1,
    }
    compensated = "once_units_compensated_total"
    assert (
        value(after, compensated, kind="keys") - value(before, compensated, kind="keys")
        == 1
    )


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_no_steps_label_holds_the_key_the_unit_or_its_intent(api, client, payments):
    api.post(payments, {"amount": 500, "ship": False}, key="abandoned-key-5678")

    text = client.get("/metrics").content.decode()

    unit = UnitRecord.objects.get()
    assert "once_steps_total" in text and "once_units_compensated_total" in text
    for secret in ("abandoned-key-5678", unit.pk, unit.intent, api.auth):
        assert secret not in text


def per_item_refund(key, result):
    return None


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_a_step_named_per_item_counts_under_its_name_before_the_colon(client):
    # docs/steps.md names a loop's calls f"charge:{item.pk}": the item's id
    # must not become a label value (one series per order line).
    from idempotency.shared.steps import begin
    from idempotency.shared.units import INBOX, Unit

    before = scrape(client)
    steps = begin(
        Unit(INBOX, ("billing", "m-1")), "billing m-1", lease=timedelta(seconds=30)
    )
    for item in (101, 102, 103):
        steps.step(f"charge:{item}", lambda key: None, undo=per_item_refund)
    steps.give_up("declined")

    after = scrape(client)
    assert steps_counted(after, before, "charge", kind="inbox") == 3
    assert steps_counted(after, before, "undo:charge", undo="true", kind="inbox") == 3
    labels = [dict(labels) for name, labels in after if name == "once_steps_total"]
    assert not [each for each in labels if "10" in each["step"]]


def steps_counted(after, before, step, **labels):
    return steps(after, step, **labels) - steps(before, step, **labels)
