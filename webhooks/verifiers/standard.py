"""Standard Webhooks: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``
(or Svix's ``svix-id``, ``svix-timestamp``, ``svix-signature``)."""

import base64
import binascii
import hashlib
import hmac
from datetime import timedelta

from .base import (
    BAD_SIGNATURE,
    MALFORMED_HEADER,
    NO_SECRET,
    BaseVerifier,
    Delivery,
)
from .base import VerificationFailed as Failed

PREFIX = "whsec_"
# The fewest bytes a secret given without its base64 padding may decode to
# (the default MIN_SECRET_BYTES).
UNPADDED_MIN_BYTES = 16


class StandardWebhooksVerifier(BaseVerifier):
    # The spec's names; Svix's (svix-id, ...) are read in their place when
    # present, and are not kept on the receipt (its delivery id is).
    headers = ("webhook-id", "webhook-timestamp", "webhook-signature")
    signature_headers = ("webhook-signature", "svix-signature")
    # The signed text starts with webhook-id.
    signs_delivery_id = True
    # A message is stored once and sent as is on every retry.
    resends_same_body = True
    # webhook-timestamp is signed too.
    signs_time = True
    # The retry schedule the spec recommends (providers differ) spans
    # 75 h 35 min 5 s: longer than three days. Rounded up to whole minutes.
    retry_horizon = timedelta(hours=75, minutes=36)
    carries_event_time = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Undecodable secrets are dropped here; check() reports them, and a
        # source with one is never built (webhooks.sources).
        self._keys = [key for key in map(decode_secret, self.secrets) if key]

    def hmac_keys(self):
        return list(self._keys)

    def check(self):
        problems = super().check()
        for index, secret in enumerate(self.secrets):
            if decode_secret(secret) is None:
                problems.append(f"SECRETS[{index}] is not whsec_ + base64")
        return problems

    def verify(self, body, headers):
        id_header = _named(headers, "id")
        msg_id = self.identifier(self.header(headers, id_header), id_header)
        timestamp = self.header(headers, _named(headers, "timestamp"))
        self.timestamp(timestamp)
        signature_header = _named(headers, "signature")
        signatures = _signatures(
            self.header(headers, signature_header), signature_header
        )
        if not self._keys:
            raise Failed(NO_SECRET)
        expected = [_digest(key, msg_id, timestamp, body) for key in self._keys]
        if not self.matches(expected, signatures):
            raise Failed(BAD_SIGNATURE)
        event = self.json_object(body, headers)
        return Delivery(
            delivery_id=msg_id,
            event_type=self.body_identifier(event, "type", "event type"),
            # The payload's own timestamp says when the event happened; the
            # header's is re-signed on every retry, so it cannot order events.
            occurred_at=self.payload_time(
                event.get("timestamp"), svix=id_header.startswith("svix-")
            ),
        )

    def payload_time(self, value, *, svix: bool):
        """The payload's ISO 8601 ``timestamp``; under Svix's names a number
        is Unix milliseconds, as Clerk (which delivers through Svix) sends."""
        if svix and isinstance(value, int) and not isinstance(value, bool):
            seconds, millis = divmod(value, 1000)
            moment = self.epoch_event_time(seconds)
            return moment + timedelta(milliseconds=millis) if moment else None
        return self.iso_event_time(value)

    def sign(self, body, *, delivery_id, event_type, secret=None, timestamp=None):
        secret, signed_at = self.signing(secret, timestamp)
        key = decode_secret(secret)
        if key is None:
            raise ValueError("a Standard Webhooks secret is whsec_ + base64")
        signature = _digest(key, delivery_id, signed_at, body)
        return {
            "webhook-id": delivery_id,
            "webhook-timestamp": signed_at,
            "webhook-signature": "v1," + base64.b64encode(signature).decode(),
        }

    def stamp(self, event, delivery):
        stamped = {**event, "type": delivery.event_type}
        if delivery.occurred_at is not None:
            stamped["timestamp"] = delivery.occurred_at.isoformat()
        return stamped


def _named(headers, part: str) -> str:
    """The header that carries ``part``: ``svix-<part>`` when present, else
    ``webhook-<part>``. Svix, where the spec began, still sends its own names
    (Clerk, Resend and others deliver through it), and its library reads them
    first, one header at a time."""
    svix = f"svix-{part}"
    return svix if headers.get(svix) is not None else f"webhook-{part}"


def _digest(key: bytes, msg_id: str, timestamp: str, body: bytes) -> bytes:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return hmac.new(key, signed, hashlib.sha256).digest()


def decode_secret(secret) -> bytes | None:
    """Decode ``whsec_<base64>`` strictly; None when it is not that.

    Padding left off is restored, as the Standard Webhooks library does
    (providers and copy-pastes drop it), but only for a key of a real
    secret's length: shorter unpadded text is a typo, not a key.
    """
    if not isinstance(secret, str) or not secret.startswith(PREFIX):
        return None
    text = secret[len(PREFIX) :]
    missing = -len(text) % 4
    try:
        decoded = base64.b64decode(text + "=" * missing, validate=True)
    except (binascii.Error, ValueError):
        return None
    if missing and len(decoded) < UNPADDED_MIN_BYTES:
        return None
    return decoded or None


def _signatures(header, name):
    """Decode every ``v1,<base64>``; other versions are ignored, as specified.

    Any one signature listed may match: one that does not decode is passed
    over, as the Standard Webhooks libraries do, unless none decodes.
    """
    signatures, undecodable = [], False
    for item in header.split(" "):
        version, _, value = item.partition(",")
        if version != "v1":
            continue
        try:
            signature = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            signature = b""
        if signature:
            signatures.append(signature)
        else:
            undecodable = True
    if undecodable and not signatures:
        raise Failed(MALFORMED_HEADER, f"{name} is not base64")
    if not signatures:
        raise Failed(MALFORMED_HEADER, f"{name} has no v1 signature")
    return signatures
