"""Stripe: ``Stripe-Signature: t=<seconds>,v1=<hex>[,v1=<hex>...]``, for
snapshot events and thin events (API v2) alike."""

import hashlib
import hmac
from datetime import timedelta

from .base import (
    BAD_SIGNATURE,
    MALFORMED_HEADER,
    BaseVerifier,
    Delivery,
)
from .base import VerificationFailed as Failed


class StripeVerifier(BaseVerifier):
    headers = ("Stripe-Signature",)
    signature_headers = ("Stripe-Signature",)
    # The event id is read from the signed body.
    signs_delivery_id = True
    # t= is signed; in live mode Stripe retries a delivery for up to 3 days.
    signs_time = True
    retry_horizon = timedelta(days=3)
    carries_event_time = True

    def verify(self, body, headers):
        timestamp, signatures = _parse(self.header(headers, "Stripe-Signature"))
        self.timestamp(timestamp)
        expected = [
            _digest(secret, timestamp, body).encode() for secret in self.secrets
        ]
        if not self.matches(expected, signatures):
            raise Failed(BAD_SIGNATURE)
        event = self.json_object(body, headers)
        created = event.get("created")
        # Snapshot events say when in Unix seconds; event destinations' thin
        # events (API v2) in ISO 8601.
        if isinstance(created, str):
            occurred_at = self.iso_event_time(created)
        else:
            occurred_at = self.epoch_event_time(created)
        return Delivery(
            # The event id: the same on every retry of one event.
            delivery_id=self.body_identifier(event, "id", "event id"),
            event_type=self.body_identifier(event, "type", "event type"),
            occurred_at=occurred_at,
        )

    def sign(self, body, *, delivery_id, event_type, secret=None, timestamp=None):
        secret, signed_at = self.signing(secret, timestamp)
        signature = _digest(secret, signed_at, body)
        return {"Stripe-Signature": f"t={signed_at},v1={signature}"}

    def stamp(self, event, delivery):
        stamped = {**event, "id": delivery.delivery_id, "type": delivery.event_type}
        if delivery.occurred_at is not None:
            stamped["created"] = int(delivery.occurred_at.timestamp())
        return stamped


def _digest(secret: str, timestamp: str, body: bytes) -> str:
    # Stripe's key is the whole "whsec_..." string, not a decoding of it.
    signed = timestamp.encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def _parse(header):
    """Return the one ``t`` value and every ``v1`` signature (lowercased bytes)."""
    timestamps, signatures = [], []
    for item in header.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep:
            raise Failed(MALFORMED_HEADER, "Stripe-Signature malformed")
        if name == "t":
            timestamps.append(value)
        elif name == "v1":
            signatures.append(value.lower().encode())
    if len(timestamps) != 1 or not signatures:
        raise Failed(MALFORMED_HEADER, "Stripe-Signature needs one t and a v1")
    return timestamps[0], signatures
