"""The demo's URLs plus the baselines of the webhook intake: bare and floor."""

import hashlib
import hmac
import json
import os
import time
from datetime import UTC, datetime

from django.db import connection
from django.http import HttpResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt

from webhooks.views import WebhookView

# The receipt the intake would store, in one statement that commits on its own.
_FLOOR_INSERT = (
    "INSERT INTO webhooks_webhookreceipt (source, delivery_id, event_type, "
    "occurred_at, headers, body, body_sha256, state, attempts, worker_deaths, "
    "last_error, received_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, '', 'received', 0, 0, '', %s) "
    "ON CONFLICT DO NOTHING RETURNING id"
)


@csrf_exempt
def bare_webhook(request, source):
    """An intake that reads the body and answers 202: no verify, insert, enqueue."""
    request.read()
    return HttpResponse(status=202)


@csrf_exempt
def floor_webhook(request, source):
    """The least a correct intake does: verify Stripe's signature, INSERT the
    receipt and commit (autocommit), answer 202. Hand-written, no enqueue."""
    body = request.body
    header = request.META.get("HTTP_STRIPE_SIGNATURE", "")
    fields = dict(item.split("=", 1) for item in header.split(","))
    timestamp = fields["t"]
    if abs(time.time() - int(timestamp)) > 300:
        return HttpResponse(status=401)
    secret = os.environ["WEBHOOK_STRIPE_SECRET"].encode()
    expected = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256)
    if not hmac.compare_digest(expected.hexdigest(), fields["v1"]):
        return HttpResponse(status=401)
    event = json.loads(body)
    headers = {"Content-Type": request.META.get("CONTENT_TYPE", "")}
    with connection.cursor() as cursor:
        cursor.execute(
            _FLOOR_INSERT,
            [
                source,
                event["id"],
                event["type"],
                datetime.fromtimestamp(event["created"], UTC),
                json.dumps(headers),
                body,
                datetime.now(UTC),
            ],
        )
        cursor.fetchone()
    return HttpResponse(status=202)


class IntakeWithoutEnqueue(WebhookView):
    """Verify and insert only: splits the intake's cost from the broker's."""

    def enqueue(self, pk, using):
        pass


urlpatterns = [
    path("bare-webhook/<str:source>/", bare_webhook),
    path("floor-webhook/<str:source>/", floor_webhook),
    path("intake-no-enqueue/<str:source>/", IntakeWithoutEnqueue.as_view()),
    path("", include("project.urls")),
]
