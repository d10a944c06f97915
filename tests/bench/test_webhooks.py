"""The webhook bench's floor view stores the receipt the intake would: its
hand-written INSERT names every column the table requires."""

import hashlib
import hmac
import json
import time

import pytest
from django.test import RequestFactory

from bench import webhooks_urls
from webhooks.models import WebhookReceipt

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db]

SECRET = "whsec_bench"


def test_the_floor_view_stores_a_signed_delivery(monkeypatch):
    monkeypatch.setenv("WEBHOOK_STRIPE_SECRET", SECRET)
    now = int(time.time())
    body = json.dumps({"id": "evt_1", "type": "charge.succeeded", "created": now})
    signed = f"{now}.{body}".encode()
    signature = hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
    request = RequestFactory().post(
        "/floor-webhook/stripe/",
        body,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=f"t={now},v1={signature}",
    )

    response = webhooks_urls.floor_webhook(request, "stripe")

    assert response.status_code == 202
    [receipt] = WebhookReceipt.objects.all()
    assert (receipt.source, receipt.delivery_id) == ("stripe", "evt_1")
