"""What clients and senders chose (a key, an event type, an aggregate id, an
error's text) is shown escaped on every list and page of the console."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from idempotency.models import IdempotencyRecord
from idempotency.shared.steps.models import StepRecord, UnitRecord
from inbox.models import InboxMessage
from outbox.models import OutboxMessage
from webhooks.models import WebhookReceipt, WebhookRejection

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>"
RAW = ("<script>alert", "<img src=x", 'href="javascript:')
ESCAPED = "&lt;script&gt;"


@pytest.fixture
def hostile_rows():
    """One row of each model the console shows, every text in it hostile."""
    now = timezone.now()
    text = {"state": "failed", "last_error": HOSTILE}
    unit = UnitRecord.objects.create(
        id=uuid.uuid4().hex,
        kind="keys",
        label=HOSTILE,
        intent=HOSTILE[:64],
        state="compensating",
        reason=HOSTILE,
        error=HOSTILE,
        created_at=now,
        updated_at=now,
    )
    StepRecord.objects.create(
        unit=unit,
        name=HOSTILE,
        state="failed",
        attempt=1,
        result={HOSTILE: HOSTILE},
        error=HOSTILE,
        created_at=now,
    )
    return {
        "idempotency/idempotencyrecord": IdempotencyRecord.objects.create(
            scope=HOSTILE,
            operation=HOSTILE,
            key=HOSTILE,
            request_hash="h",
            state="completed",
            status_code=201,
            response_body=HOSTILE.encode(),
            response_headers={"Location": "javascript:alert(3)", HOSTILE: HOSTILE},
            resource_type=HOSTILE[:100],
            resource_id=HOSTILE,
            created_at=now,
            expires_at=now + timedelta(days=1),
        ),
        "webhooks/webhookreceipt": WebhookReceipt.objects.create(
            source=HOSTILE[:64],
            delivery_id=HOSTILE,
            event_type=HOSTILE,
            body=HOSTILE.encode(),
            headers={HOSTILE: HOSTILE},
            received_at=now,
            **text,
        ),
        "webhooks/webhookrejection": WebhookRejection.objects.create(
            source=HOSTILE[:64],
            reason="bad-signature",
            day=now.date(),
            count=1,
            last_seen_at=now,
        ),
        "outbox/outboxmessage": OutboxMessage.objects.create(
            aggregatetype=HOSTILE,
            aggregateid=HOSTILE,
            type=HOSTILE,
            payload={HOSTILE: HOSTILE},
            headers={HOSTILE: HOSTILE},
            created_at=now,
            available_at=now,
            **{**text, "state": "dead"},
        ),
        "inbox/inboxmessage": InboxMessage.objects.create(
            subscriber=HOSTILE[:100],
            message_id=HOSTILE,
            received_at=now,
            redrive={HOSTILE: HOSTILE},
            **{**text, "state": "dead"},
        ),
        "idempotency/unitrecord": unit,
    }


def test_every_list_and_page_shows_hostile_values_escaped(admin_client, hostile_rows):
    pages = [
        url
        for path, row in hostile_rows.items()
        for url in (f"/admin/{path}/", f"/admin/{path}/{row.pk}/change/")
    ]
    raw, unshown = [], []
    for url in [*pages, "/admin/ops/"]:
        answer = admin_client.get(url)
        assert answer.status_code == 200, url
        content = answer.content.decode()
        raw += [(url, text) for text in RAW if text in content]
        if url != "/admin/ops/" and ESCAPED not in content:
            unshown.append(url)

    assert raw == []
    # The values were on the pages, escaped: the check above looked at them.
    assert unshown == []
