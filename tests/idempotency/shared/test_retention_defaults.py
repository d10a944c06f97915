"""DESIGN, Retention: "Defaults: keys 24 h (per operation), outbox published
7 d, inbox 30 d, receipts 30 d" (docs/retention.md adds units, 90 days).
With no retention setting, ``manage.py purge_idempotency`` keeps each row
until its default has passed, and deletes it just after."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from idempotency.models import IdempotencyRecord
from idempotency.shared.steps.models import UnitRecord
from idempotency.shared.units import KEYS, Unit
from inbox.models import InboxMessage
from outbox.models import OutboxMessage
from webhooks.models import WebhookReceipt

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)


def purge(kind) -> str:
    out = StringIO()
    call_command("purge_idempotency", "--only", kind, stdout=out)
    return out.getvalue().strip()


def test_a_key_is_kept_24_hours_by_default(api, clock):
    assert api.post("/t/widgets/", {"name": "a"}, key="k").status_code == 201

    clock.advance(timedelta(hours=24) - MINUTE)
    assert purge("idempotency") == "idempotency: deleted 0"
    clock.advance(2 * MINUTE)
    assert purge("idempotency") == "idempotency: deleted 1"
    assert not IdempotencyRecord.objects.exists()


def test_a_keys_retention_is_its_operations(api, clock):
    # Rule 5: retention is a per-operation business setting. A view's ttl
    # (60 s here) is its keys' retention; another operation keeps the default.
    assert api.post("/t/function/", {"name": "a"}, key="short").status_code == 201
    assert api.post("/t/widgets/", {"name": "a"}, key="long").status_code == 201

    clock.advance(timedelta(seconds=61))

    assert purge("idempotency") == "idempotency: deleted 1"
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["long"]


@pytest.mark.parametrize(
    ("kind", "default"),
    [
        ("outbox", timedelta(days=7)),
        ("inbox", timedelta(days=30)),
        ("webhooks", timedelta(days=30)),
        ("units", timedelta(days=90)),
    ],
)
def test_each_kind_is_kept_its_default_retention(clock, kind, default):
    now = clock.now()
    if kind == "outbox":
        OutboxMessage.objects.create(
            aggregatetype="order",
            aggregateid="1",
            type="created",
            payload={},
            state="published",
            created_at=now,
            available_at=now,
            published_at=now,
        )
    elif kind == "inbox":
        InboxMessage.objects.create(
            subscriber="s", message_id="m", state="applied", received_at=now
        )
    elif kind == "webhooks":
        WebhookReceipt.objects.create(
            source="github",
            delivery_id="d",
            state="processed",
            body=b"{}",
            received_at=now,
            processed_at=now,
        )
    else:
        UnitRecord.objects.create(
            id=Unit(KEYS, ("scope", "op", "k")).identity,
            kind=KEYS,
            state="done",
            created_at=now,
            updated_at=now,
        )

    clock.advance(default - MINUTE)
    assert purge(kind) == f"{kind}: deleted 0"
    clock.advance(2 * MINUTE)
    assert purge(kind) == f"{kind}: deleted 1"


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("OUTBOX", {"RETENTION": 0}),
        ("INBOX", {"RETENTION": 0}),
        ("WEBHOOKS", {"RETENTION": 0}),
        ("IDEMPOTENCY", {"UNIT_RETENTION": 0}),
    ],
)
def test_a_retention_of_0_fails_the_purge_closed(settings, clock, setting, value):
    # Rule 9: a setting that would switch a guarantee off is an error at
    # first use. A purge by a retention of 0 would forget at once what a
    # retry, a redelivery or a resend still needs: it deletes nothing, not
    # even the kinds whose retention is fine.
    setattr(settings, setting, {**getattr(settings, setting), **value})
    IdempotencyRecord.objects.create(
        scope="user:1",
        operation="op",
        key="k",
        request_hash="h",
        state="completed",
        created_at=clock.now(),
        expires_at=clock.now() - MINUTE,
    )

    with pytest.raises(CommandError, match="RETENTION"):
        call_command("purge_idempotency", stdout=StringIO())
    assert IdempotencyRecord.objects.exists()
