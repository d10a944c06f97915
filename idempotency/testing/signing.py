"""Sign a delivery for a configured webhook source, as its provider would.

The kit signs with the source's own settings (its first, newest secret and
its OPTIONS), without any provider SDK, for every bundled verifier:

* ``github``: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>``;
* ``stripe``: ``Stripe-Signature: t=<seconds>,v1=<hex HMAC of "t.body">``,
  keyed with the whole ``whsec_…`` string;
* ``standard`` (Standard Webhooks): ``webhook-signature: v1,<base64 HMAC of
  "id.timestamp.body">``, keyed with the base64-decoded part after ``whsec_``;
* ``hmac``: the source's ``SIGNATURE_HEADER``, ``PREFIX``, hex or base64
  ``ENCODING``, over the body or ``"<timestamp>.<body>"`` with a
  ``TIMESTAMP_HEADER``.
"""

import base64
import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from idempotency.shared import clock

GITHUB = "github"
STRIPE = "stripe"
STANDARD = "standard"
HMAC = "hmac"
# The verifiers that read when an event happened from the delivery, so that
# handlers can tell an older event from a newer one (event.occurred_at).
TIMED = (STRIPE, STANDARD)


class CannotSign(Exception):
    """The kit does not know how this source signs its deliveries."""


@dataclass(frozen=True)
class SignedDelivery:
    """A delivery ready to POST: its exact body bytes and its headers."""

    source: str
    delivery_id: str
    event_type: str
    body: bytes
    headers: dict
    content_type: str = "application/json"


def verifier_kind(source: str) -> str:
    """``github``, ``stripe``, ``standard`` or ``hmac``: how ``source`` verifies.

    Raises ``CannotSign`` for an unknown source or a verifier of one's own.
    """
    from webhooks.verifiers.github import GitHubVerifier
    from webhooks.verifiers.hmac import HmacVerifier
    from webhooks.verifiers.standard import StandardWebhooksVerifier
    from webhooks.verifiers.stripe import StripeVerifier

    configured = _configured(source)
    kinds = {
        GitHubVerifier: GITHUB,
        StripeVerifier: STRIPE,
        StandardWebhooksVerifier: STANDARD,
        HmacVerifier: HMAC,
    }
    for verifier_class, kind in kinds.items():
        if isinstance(configured.verifier, verifier_class):
            return kind
    raise CannotSign(
        f"source {source!r} uses {type(configured.verifier).__name__}, which the "
        "kit cannot sign for; give the suite a sign() method"
    )


def sign(
    source: str,
    body: dict | bytes,
    *,
    event_type: str,
    delivery_id: str | None = None,
    occurred_at: datetime | None = None,
) -> SignedDelivery:
    """Sign ``body`` for ``source`` as an ``event_type`` delivery.

    A dict body is the event's JSON object as the provider sends it; the kit
    sets the fields that carry the delivery id, the event type and the event
    time for the source's verifier (Stripe: ``id``, ``type``, ``created``;
    Standard Webhooks: ``type``, ``timestamp``). Bytes are sent as they are.
    ``occurred_at`` defaults to now, on the apps' clock.
    """
    kind = verifier_kind(source)
    verifier = _configured(source).verifier
    secret = verifier.secrets[0]
    occurred_at = occurred_at or clock.now()
    delivery_id = delivery_id or _new_id(kind)
    payload = _body(kind, body, delivery_id, event_type, occurred_at)
    # Signed now, whenever the event happened: a retry is signed anew.
    signed_at = str(int(clock.now().timestamp()))
    if kind == GITHUB:
        headers = _github(secret, payload, delivery_id, event_type)
    elif kind == STRIPE:
        headers = _stripe(secret, payload, signed_at)
    elif kind == STANDARD:
        headers = _standard(secret, payload, delivery_id, signed_at)
    else:
        options = verifier.options
        stamp = signed_at if options["TIMESTAMP_HEADER"] else None
        headers = _hmac(options, secret, payload, delivery_id, event_type, stamp)
    return SignedDelivery(source, delivery_id, event_type, payload, headers)


def _configured(source: str):
    from webhooks import sources

    configured = sources.get(source)
    if configured is None:
        raise CannotSign(f"WEBHOOKS['SOURCES'] has no source {source!r}")
    return configured


def _new_id(kind: str) -> str:
    token = uuid.uuid4().hex
    return {STRIPE: f"evt_once{token}", STANDARD: f"msg_once{token}"}.get(
        kind, f"once-{token}"
    )


def _body(kind, body: Any, delivery_id, event_type, occurred_at) -> bytes:
    if isinstance(body, bytes):
        return body
    event = dict(body)
    if kind == STRIPE:
        event.update(
            id=delivery_id, type=event_type, created=int(occurred_at.timestamp())
        )
    elif kind == STANDARD:
        event.update(type=event_type, timestamp=occurred_at.isoformat())
    return json.dumps(event).encode()


def _hex_hmac(key: bytes, message: bytes) -> str:
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _github(secret, body, delivery_id, event_type) -> dict:
    return {
        "X-Hub-Signature-256": "sha256=" + _hex_hmac(secret.encode(), body),
        "X-GitHub-Delivery": delivery_id,
        "X-GitHub-Event": event_type,
    }


def _stripe(secret, body, signed_at) -> dict:
    # Stripe's key is the whole "whsec_..." string, not a decoding of it.
    digest = _hex_hmac(secret.encode(), f"{signed_at}.".encode() + body)
    return {"Stripe-Signature": f"t={signed_at},v1={digest}"}


def _standard(secret, body, delivery_id, signed_at) -> dict:
    # Standard Webhooks keys with the bytes the base64 after "whsec_" encodes.
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{delivery_id}.{signed_at}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": signed_at,
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
    }


def _hmac(options, secret, body, delivery_id, event_type, signed_at=None) -> dict:
    signed = body if signed_at is None else f"{signed_at}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).digest()
    if options["ENCODING"] == "base64":
        encoded = base64.b64encode(digest).decode()
    else:
        encoded = digest.hex()
    headers = {
        options["SIGNATURE_HEADER"]: options["PREFIX"] + encoded,
        options["ID_HEADER"]: delivery_id,
        options["EVENT_HEADER"]: event_type,
    }
    if signed_at is not None:
        headers[options["TIMESTAMP_HEADER"]] = signed_at
    return headers
