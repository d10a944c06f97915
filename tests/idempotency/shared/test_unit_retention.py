"""Retention for units of steps: finished units go with their step log;
running and compensating units, and recent ones, stay."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.utils import timezone

from idempotency.shared import retention
from idempotency.shared.steps import retention as unit_retention
from idempotency.shared.steps.models import StepRecord, UnitRecord

pytestmark = pytest.mark.django_db

OLD = timedelta(days=91)  # past the default UNIT_RETENTION of 90 days


def make_unit(name, state, *, age):
    at = timezone.now() - age
    unit = UnitRecord.objects.create(
        id=name, kind="keys", intent="i", state=state, created_at=at, updated_at=at
    )
    StepRecord.objects.create(
        unit=unit, name="charge", state="done", attempt=1, created_at=at
    )
    return unit


@pytest.fixture
def units():
    make_unit("old-done", "done", age=OLD)
    make_unit("old-compensated", "compensated", age=OLD)
    make_unit("old-running", "running", age=OLD)
    make_unit("old-compensating", "compensating", age=OLD)
    make_unit("recent-done", "done", age=timedelta(days=89))


def test_purge_deletes_old_finished_units_with_their_steps(units):
    retention.purge(only=["units"])

    assert set(UnitRecord.objects.values_list("pk", flat=True)) == {
        "old-running",
        "old-compensating",
        "recent-done",
    }
    assert set(StepRecord.objects.values_list("unit_id", flat=True)) == {
        "old-running",
        "old-compensating",
        "recent-done",
    }


def test_the_purge_counts_units_not_their_step_rows(units):
    out = StringIO()
    call_command("purge_idempotency", "--dry-run", "--only=units", stdout=out)
    assert "units: would delete 2" in out.getvalue()

    out = StringIO()
    call_command("purge_idempotency", "--only=units", "--batch-size=1", stdout=out)
    assert "units: deleted 2" in out.getvalue()


def test_a_unit_retention_shorter_than_its_owners_is_refused(units, settings):
    # INBOX and WEBHOOKS keep their ids and receipts 30 days by default.
    settings.IDEMPOTENCY = {"UNIT_RETENTION": timedelta(days=7)}

    with pytest.raises(ImproperlyConfigured, match="UNIT_RETENTION"):
        retention.purge(only=["units"])
    assert UnitRecord.objects.count() == 5
    [error] = unit_retention.check_retention()
    assert error.id == "idempotency.E016"
    assert "than the inbox owner's retention" in error.msg


def test_an_owner_whose_retention_is_refused_refuses_the_units_purge(units, settings):
    # The inbox keeps ids 200 days, but a redelivery can come after 300: its
    # own purge refuses that. Skipped, its 200 days were never compared with
    # UNIT_RETENTION (90), and "--only units" purged units the inbox's ids
    # could still bring a redelivery into.
    settings.INBOX = {
        "RETENTION": timedelta(days=200),
        "REDELIVERY_HORIZON": timedelta(days=300),
    }

    with pytest.raises(ImproperlyConfigured, match="inbox"):
        retention.purge(only=["units"])
    assert UnitRecord.objects.count() == 5
    # The inbox's own check reports it; E016 does not say it twice.
    assert unit_retention.check_retention() == []


def test_a_unit_retention_shorter_than_the_keys_ttl_is_refused(settings):
    settings.IDEMPOTENCY = {"TTL": timedelta(days=100)}

    [error] = unit_retention.check_retention()
    assert "than the keys owner's retention (8640000 s)" in error.msg


def test_the_default_unit_retention_passes():
    assert unit_retention.check_retention() == []
