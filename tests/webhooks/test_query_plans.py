"""A resent delivery is found through its delivery id or body, whatever the
planner's statistics say of its source.

A source added since the last ANALYZE is one the statistics have not seen:
an index led by ``source`` must not then look like the way to one delivery.
"""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from tests.query_plans import captured, rows_walked_past
from webhooks import processing
from webhooks.models import WebhookReceipt

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db]

ROWS = 3000
TABLE = WebhookReceipt._meta.db_table


@pytest.fixture
def unseen_source():
    """ROWS receipts of a source the statistics have never seen."""
    now = timezone.now()

    def receipts(source, count):
        return [
            WebhookReceipt(
                source=source,
                delivery_id=f"{source}-{n}",
                body_sha256=f"{n:064x}" if source == "github" else "",
                event_type="push",
                body=b"{}",
                headers={},
                received_at=now,
            )
            for n in range(count)
        ]

    WebhookReceipt.objects.bulk_create(receipts("stripe", ROWS))
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {TABLE}")
    WebhookReceipt.objects.bulk_create(receipts("github", ROWS))


@pytest.mark.parametrize("body_sha256", ["", f"{7:064x}"], ids=["by id", "by body"])
def test_a_resent_delivery_is_found_straight(unseen_source, body_sha256):
    receipts = WebhookReceipt.objects

    def find():
        receipts.duplicate_of("github", "github-7", body_sha256)

    assert rows_walked_past(captured(find, TABLE)) == 0


def test_a_drains_turn_takes_its_sources_oldest_receipt_straight():
    # A backlog of one source, and the processed receipts retention keeps of
    # another, older than that other's one received receipt: its turn walks
    # past neither.
    now = timezone.now()
    WebhookReceipt.objects.bulk_create(
        WebhookReceipt(
            source=source,
            delivery_id=f"{source}-{n}",
            event_type="push",
            body=b"{}",
            headers={},
            state=state,
            received_at=now + timedelta(milliseconds=n),
        )
        for source, state in (("github", "received"), ("stripe", "processed"))
        for n in range(ROWS)
    )
    WebhookReceipt.objects.create(
        source="stripe",
        delivery_id="stripe-new",
        event_type="push",
        body=b"{}",
        received_at=now + timedelta(seconds=10),
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {TABLE}")

    def take():
        assert processing._next_received(WebhookReceipt.objects, "stripe")

    assert rows_walked_past(captured(take, TABLE)) == 0
