"""Rows in every state a gauge or a console figure counts."""

from datetime import timedelta

from django.utils import timezone

from idempotency.models import IdempotencyRecord
from idempotency.shared.steps.models import UnitRecord
from inbox.models import InboxMessage
from outbox.models import OutboxMessage
from webhooks.models import WebhookReceipt


def outbox_message(n, recorded_at, **fields) -> OutboxMessage:
    """An event of aggregate ``n``, unsaved; pending unless ``fields`` say."""
    return OutboxMessage(
        aggregatetype="order",
        aggregateid=str(n),
        type="order.created",
        payload={},
        created_at=recorded_at,
        available_at=recorded_at,
        **fields,
    )


def seed(now=None):
    now = now or timezone.now()
    for n, lease in enumerate([timedelta(minutes=5), *[timedelta(minutes=-5)] * 2]):
        IdempotencyRecord.objects.create(
            scope="user:1",
            operation="op",
            key=f"pending-{n}",
            request_hash="h",
            state="pending",
            created_at=now,
            expires_at=now + timedelta(days=1),
            locked_until=now + lease,
        )
    # Stuck: the two mid-steps past their lease; not the rest.
    for n, (state, lease) in enumerate(
        [
            ("running", timedelta(minutes=-5)),
            ("compensating", timedelta(minutes=-5)),
            ("running", timedelta(minutes=5)),
            ("running", None),
            ("done", timedelta(minutes=-5)),
        ]
    ):
        UnitRecord.objects.create(
            id=f"{n:064x}",
            kind="keys",
            intent="i",
            state=state,
            lease_expires_at=lease and now + lease,
            created_at=now,
            updated_at=now,
        )
    for n, (state, error, age) in enumerate(
        [
            ("pending", "", 30),
            ("pending", "ConnectionError: broker down", 400),
            ("pending", "", 5),
            ("dead", "gave up", 9000),
            ("published", "", 60),
        ]
    ):
        outbox_message(
            n,
            now - timedelta(seconds=age),
            state=state,
            last_error=error,
            published_at=now if state == "published" else None,
        ).save()
    for n, state in enumerate(["applied", "dead", "dead"]):
        InboxMessage.objects.create(
            subscriber="stock",
            message_id=f"m-{n}",
            received_at=now,
            state=state,
        )
    for n, (source, state) in enumerate(
        [
            ("github", "received"),
            ("github", "received"),
            ("github", "failed"),
            ("stripe", "received"),
            ("stripe", "processed"),
        ]
    ):
        WebhookReceipt.objects.create(
            source=source,
            delivery_id=f"d-{n}",
            body=b"{}",
            state=state,
            received_at=now,
        )
