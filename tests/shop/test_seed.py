"""The demo seeds: users, orders and a console with every state."""

import pytest
from django.core.management import call_command

from idempotency.models import IdempotencyRecord
from inbox.models import InboxMessage
from outbox.models import OutboxMessage
from webhooks.models import WebhookReceipt

pytestmark = pytest.mark.django_db


def test_seeding_twice_is_harmless_and_covers_every_state(client):
    for _ in range(2):
        call_command("seed_demo")
        call_command("seed_console")

    assert set(IdempotencyRecord.objects.values_list("state", flat=True)) == {
        "pending",
        "completed",
        "failed",
    }
    assert set(OutboxMessage.objects.values_list("state", flat=True)) == {
        "pending",
        "published",
        "dead",
    }
    assert InboxMessage.objects.filter(duplicates__gt=0).exists()
    assert set(WebhookReceipt.objects.values_list("state", flat=True)) == {
        "received",
        "processed",
        "skipped",
        "failed",
    }

    assert client.login(username="admin", password="admin")
    dashboard = client.get("/admin/ops/")
    figures = {f.label: f.value for p in dashboard.context["panels"] for f in p.figures}
    assert figures["stuck leases"] == 1
    assert figures["dead"] == 1
    assert figures["duplicates dropped"] == 2
    awaiting = {
        row["kind"]: row["count"] for row in dashboard.context["awaiting_purge"]
    }
    assert awaiting["idempotency"] == 1
    assert awaiting["outbox"] == 1
    assert awaiting["inbox"] == 1
    assert awaiting["webhooks"] >= 1
