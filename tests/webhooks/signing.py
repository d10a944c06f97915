"""Sign test deliveries the way each provider does, with its own library."""

import base64
import hashlib
import hmac
import json
import time
from datetime import UTC, datetime

import standardwebhooks
import stripe

GITHUB_SECRET = "It's a Secret to Everybody"
STRIPE_SECRET = "whsec_test_stripe_secret_1"
STRIPE_OLD_SECRET = "whsec_test_stripe_secret_0"
STANDARD_SECRET = "whsec_" + base64.b64encode(b"standard-secret-bytes-0123456").decode()
STANDARD_OLD_SECRET = (
    "whsec_" + base64.b64encode(b"older-standard-secret-9876").decode()
)
HMAC_SECRET = "generic-hmac-secret"


def event_body(delivery_id="evt_1", event_type="thing.happened", created=None, **data):
    """One JSON body every provider's verifier can read."""
    created = int(time.time()) if created is None else created
    return json.dumps(
        {
            "id": delivery_id,
            "type": event_type,
            "created": created,
            "timestamp": datetime.fromtimestamp(created, UTC).isoformat(),
            "data": data,
        }
    ).encode()


def github_headers(body, secret=GITHUB_SECRET, delivery_id="evt_1", event="push"):
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Delivery": delivery_id,
        "X-GitHub-Event": event,
    }


def stripe_headers(body, secret=STRIPE_SECRET, timestamp=None):
    timestamp = int(time.time()) if timestamp is None else timestamp
    try:
        header = stripe.WebhookSignature.generate_signature_header(
            body.decode(), secret, timestamp=timestamp
        )
    except UnicodeDecodeError:
        # The library signs text only; sign raw bytes the same way by hand.
        signed = f"{timestamp}.".encode() + body
        digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        header = f"t={timestamp},v1={digest}"
    return {"Stripe-Signature": header}


def standard_headers(body, secret=STANDARD_SECRET, msg_id="evt_1", timestamp=None):
    timestamp = int(time.time()) if timestamp is None else timestamp
    try:
        signature = standardwebhooks.Webhook(secret).sign(
            msg_id, datetime.fromtimestamp(timestamp, UTC), body.decode()
        )
    except UnicodeDecodeError:
        key = base64.b64decode(secret.removeprefix("whsec_"))
        signed = f"{msg_id}.{timestamp}.".encode() + body
        digest = hmac.new(key, signed, hashlib.sha256).digest()
        signature = "v1," + base64.b64encode(digest).decode()
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }


def hmac_headers(
    body, secret=HMAC_SECRET, delivery_id="evt_1", event="ping", timestamp=None
):
    """The generic verifier's defaults; with ``timestamp``, "<t>.<body>" is
    signed and sent in X-Webhook-Timestamp (OPTIONS TIMESTAMP_HEADER)."""
    signed = body if timestamp is None else f"{timestamp}.".encode() + body
    headers = {
        "X-Signature": hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest(),
        "X-Webhook-Id": delivery_id,
        "X-Webhook-Event": event,
    }
    if timestamp is not None:
        headers["X-Webhook-Timestamp"] = str(timestamp)
    return headers
