"""The counters of what the apps share: the purge's rows by kind."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from idempotency.models import IdempotencyRecord
from idempotency.shared import retention

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
